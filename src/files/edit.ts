import { formatPatch, structuredPatch } from 'diff';
import { lstat } from 'node:fs/promises';
import { badRequest, conflict, errnoToHttpError, HttpError } from '../errors.js';
import { fillAtomically, fillTemp } from './atomic-write.js';
import { sha256Of } from './checksum.js';
import { openReadable } from './open-readable.js';
import { READ_LIMIT } from './read.js';

/** The diff in an edit's answer is cut here (at a line end); `diff_truncated` says so. */
export const MAX_DIFF_BYTES = 64 * 1024;
/** Bounds on the diff's work on the event loop: past them the changed stretch is shown as one hunk. */
const MAX_DIFF_EDIT_LENGTH = 200;
const MAX_DIFF_LINES = 5000;
/** How many lines where an `old` was found a 409 names. */
const MAX_REPORTED_LINES = 10;

export interface Edit {
  old: string;
  new: string;
  count?: number;
}

export interface Edited {
  path: string;
  size: number;
  sha256: string;
  replacements: number;
  diff: string;
  diff_truncated: boolean;
}

/** Start offsets of the non-overlapping occurrences of `needle`. */
function occurrences(haystack: Buffer, needle: Buffer): number[] {
  const found: number[] = [];
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + needle.length)) found.push(at);
  return found;
}

/** 1-based line numbers of byte offsets (sorted). */
function lineNumbers(bytes: Buffer, offsets: number[]): number[] {
  const lines: number[] = [];
  let line = 1;
  let from = 0;
  for (const offset of offsets) {
    for (let at = bytes.indexOf(10, from); at !== -1 && at < offset; at = bytes.indexOf(10, at + 1)) line++;
    from = offset;
    lines.push(line);
  }
  return lines;
}

/** Applies the edits in order, each to the previous one's result; any `old` found a number of times other than its `count` is a 409. */
export function applyEdits(original: Buffer, edits: readonly Edit[]): { bytes: Buffer; replacements: number } {
  let bytes = original;
  let replacements = 0;
  edits.forEach((edit, index) => {
    if (edit.old === '') throw badRequest(`edits[${index}].old: must not be empty`);
    const old = Buffer.from(edit.old, 'utf8');
    const expected = edit.count ?? 1;
    const found = occurrences(bytes, old);
    if (found.length !== expected) {
      const where = found.length === 0 ? '' : `, at line${found.length > 1 ? 's' : ''} ${lineNumbers(bytes, found.slice(0, MAX_REPORTED_LINES)).join(', ')}${found.length > MAX_REPORTED_LINES ? ', …' : ''}`;
      throw conflict(`edits[${index}]: old was found ${found.length} time${found.length === 1 ? '' : 's'}, expected ${expected}${where}; nothing was changed`);
    }
    const replacement = Buffer.from(edit.new, 'utf8');
    const parts: Buffer[] = [];
    let from = 0;
    for (const at of found) {
      parts.push(bytes.subarray(from, at), replacement);
      from = at + old.length;
    }
    parts.push(bytes.subarray(from));
    bytes = Buffer.concat(parts);
    replacements += found.length;
  });
  return { bytes, replacements };
}

/** Lines of context around each change, as `diff -u`. */
const CONTEXT_LINES = 3;

/**
 * A unified diff of the change, cut at MAX_DIFF_BYTES on a line end. Only the
 * stretch between the first and the last changed line (plus context) is
 * diffed, with a bound on the work; past it the stretch is one hunk of
 * removed and added lines.
 */
function unifiedDiff(path: string, before: Buffer, after: Buffer): { diff: string; truncated: boolean } {
  const a = before.toString('utf8').split('\n');
  const b = after.toString('utf8').split('\n');
  // The empty string after a final newline is not a line (a missing final newline is not marked: the diff is for reading).
  if (a.at(-1) === '') a.pop();
  if (b.at(-1) === '') b.pop();
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const start = Math.max(0, head - CONTEXT_LINES);
  const keepTail = Math.max(0, tail - CONTEXT_LINES);
  const oldLines = a.slice(start, a.length - keepTail);
  const newLines = b.slice(start, b.length - keepTail);
  const header = `--- ${path}\n+++ ${path}\n`;
  let hunks: string | undefined;
  if (oldLines.length + newLines.length <= MAX_DIFF_LINES) {
    const patch = structuredPatch(path, path, `${oldLines.join('\n')}\n`, `${newLines.join('\n')}\n`, undefined, undefined, { context: CONTEXT_LINES, maxEditLength: MAX_DIFF_EDIT_LENGTH });
    if (patch) {
      for (const hunk of patch.hunks) {
        hunk.oldStart += start;
        hunk.newStart += start;
      }
      hunks = formatPatch(patch).split('\n').slice(4).join('\n');
    }
  }
  hunks ??= `@@ -${start + 1},${oldLines.length} +${start + 1},${newLines.length} @@\n${oldLines.map((line, i) => (i < head - start ? ` ${line}` : `-${line}`)).join('\n')}\n${newLines.slice(head - start).map((line) => `+${line}`).join('\n')}\n`;
  const diff = header + hunks;
  if (Buffer.byteLength(diff) <= MAX_DIFF_BYTES) return { diff, truncated: false };
  const cut = Buffer.from(diff).subarray(0, MAX_DIFF_BYTES);
  return { diff: cut.subarray(0, cut.lastIndexOf(10) + 1).toString('utf8'), truncated: true };
}

/**
 * Exact edits of one file, all or nothing: the new bytes go to a temporary
 * file beside it (same mode and owner), renamed over it. Any 4xx leaves the
 * file untouched. `expectSha256`, when given, must be the file's current hash.
 */
export async function editFile(path: string, edits: readonly Edit[], expectSha256: string | undefined): Promise<Edited> {
  // Renaming over a symlink would replace the link with a file: edit its target instead.
  const link = await lstat(path).catch((error) => {
    throw errnoToHttpError(error, path);
  });
  if (link.isSymbolicLink()) throw badRequest(`${path}: is a symlink; edit its target`);
  const { handle, stats } = await openReadable(path);
  let original: Buffer;
  try {
    if (!stats.isFile()) throw badRequest(`${path}: not a regular file`);
    if (stats.size > READ_LIMIT) throw new HttpError(413, `${path}: ${stats.size} bytes is over the ${READ_LIMIT}-byte limit of an edit`);
    original = await handle.readFile();
  } catch (error) {
    throw errnoToHttpError(error, path);
  } finally {
    await handle.close();
  }
  const current = sha256Of(original);
  if (expectSha256 !== undefined && expectSha256 !== current) throw conflict(`${path}: expect_sha256 does not match; the file's sha256 is ${current}; nothing was changed`);
  const { bytes, replacements } = applyEdits(original, edits);
  // The file keeps its owner (root only may give files away) and its mode (openTarget).
  const owner = process.getuid?.() === 0 ? { uid: stats.uid, gid: stats.gid } : undefined;
  const written = await fillAtomically(path, owner, (mode) =>
    fillTemp(path, owner, mode, async (temp) => {
      try {
        await temp.writeFile(bytes);
        await temp.sync();
      } finally {
        await temp.close();
      }
    }),
  );
  return { path, size: written.size, sha256: sha256Of(bytes), replacements, ...diffFields(path, original, bytes) };
}

function diffFields(path: string, before: Buffer, after: Buffer): { diff: string; diff_truncated: boolean } {
  const { diff, truncated } = unifiedDiff(path, before, after);
  return { diff, diff_truncated: truncated };
}
