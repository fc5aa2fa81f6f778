import { readSync } from 'node:fs';
import type { SearchCalls } from '../../native/search-calls.js';
import type { Pattern } from './pattern.js';

/**
 * How much of a file is read and searched at once: also the longest stretch
 * of work between two chances to yield to the event loop. A regex may end on
 * V8's linear-time fallback engine (2-5 MB/s on a loaded machine): 16 KiB is
 * 3-8 ms of it. A literal is found by Buffer.indexOf, fast whatever the bytes.
 */
export const REGEX_CHUNK_BYTES = 16 * 1024;
export const LITERAL_CHUNK_BYTES = 64 * 1024;

/** A matched or context line longer than this is cut (minified files have megabyte lines). */
export const MAX_LINE_CHARS = 4096;

export interface LineMatch {
  line: number;
  /** 1-based byte offset of the first match in the line, as ripgrep's --column. */
  column: number;
  text: string;
  before: string[];
  after: string[];
}

export interface ScanOptions {
  context: number;
  maxPerFile: number;
  /** Files over this many bytes are skipped (ripgrep's --max-filesize); 0: no limit. */
  maxFileBytes: number;
  /** The addon's byte loops (memchr); undefined: Buffer.indexOf here, more slowly. */
  bytes: Pick<SearchCalls, 'countNewlines' | 'findNeedle'> | undefined;
}

const cut = (line: string) => (line.length > MAX_LINE_CHARS ? line.slice(0, MAX_LINE_CHARS) : line);

/**
 * Searches one open file chunk by chunk, in ripgrep's line-oriented way: a
 * match never spans lines, a NUL byte ends the search of the file (binary).
 * `buffer` is the search's one reusable read buffer; `size` is fstat's; `start`: how
 * many of the file's first bytes the buffer already holds (undefined: none read yet). Yields after each chunk
 * (the caller may give the event loop its turn there); returns how many lines
 * matched. `onMatch` returns false to stop (the search's max_results).
 */
export function* scanFile(fd: number, size: number, start: number | undefined, buffer: Buffer, pattern: Pattern, options: ScanOptions, onMatch: (match: LineMatch) => boolean): Generator<void, number, undefined> {
  let carry = 0;
  let offset = 0;
  let lineNo = 1;
  let matched = 0;
  /** The last `context` lines before the buffer's start, for before-context across chunks. */
  let recent: string[] = [];
  /** Matches still waiting for after-context from the next chunk. */
  let pending: LineMatch[] = [];
  let stopped = false;
  const emit = (match: LineMatch) => {
    if (!onMatch(match)) stopped = true;
  };
  try {
    for (;;) {
      const length = offset === 0 && start !== undefined ? start : readSync(fd, buffer, carry, buffer.length - carry, offset);
      offset += length;
      const end = carry + length;
      if (end === 0) break;
      // Up to the size fstat gave: no extra read to learn of the end, and a file that grows meanwhile ends there.
      const eof = length === 0 || offset >= size;
      const view = buffer.subarray(0, end);
      // Binary: ripgrep stops at the first NUL byte; matches before it stand.
      if (view.indexOf(0, carry) !== -1) break;
      let boundary = eof ? end : view.lastIndexOf(10, end - 1) + 1;
      if (boundary === 0) boundary = end; // one line longer than the buffer: searched in pieces
      const region = buffer.subarray(0, boundary);
      const needsText = pending.length > 0 || !pattern.needle || (options.bytes ? options.bytes.findNeedle(region, pattern.needle) : region.indexOf(pattern.needle)) !== -1;
      if (needsText) {
        const found = () => ++matched < options.maxPerFile && !stopped;
        const lines = scanText(region.toString('utf8'), pattern, options.context, { firstLine: lineNo, recent, waiting: pending, eof, emit, found });
        pending = lines.pending;
        lineNo = lines.nextLine;
        recent = lines.recent;
      } else {
        // Line numbers matter only to a later chunk of this file: a file searched in one chunk (most are) is not counted.
        if (!eof) lineNo += options.bytes ? options.bytes.countNewlines(region) : countNewlines(region);
        if (options.context > 0) recent = lastLines(region.toString('utf8'), options.context, recent);
      }
      if (stopped || matched >= options.maxPerFile) break;
      buffer.copyWithin(0, boundary, end);
      carry = end - boundary;
      if (options.maxFileBytes > 0 && offset > options.maxFileBytes) break;
      if (eof && carry === 0) break;
      yield;
    }
  } finally {
    for (const match of pending) emit(match);
  }
  return matched;
}

function countNewlines(bytes: Buffer): number {
  let count = 0;
  for (let at = bytes.indexOf(10); at !== -1; at = bytes.indexOf(10, at + 1)) count++;
  return count;
}

/** The last `count` complete lines of `text` (which ends at a line boundary), preceded by `before` if it has fewer. */
function lastLines(text: string, count: number, before: string[]): string[] {
  const body = text.endsWith('\n') ? text.slice(0, -1) : text;
  const lines: string[] = [];
  let end = body.length;
  while (lines.length < count && end >= 0 && text.length > 0) {
    const start = body.lastIndexOf('\n', end - 1) + 1;
    lines.unshift(cut(body.slice(start, end)));
    if (start === 0) break;
    end = start - 1;
  }
  return lines.length >= count ? lines : [...before, ...lines].slice(-count);
}

/** Finds the first match at or after `from`: [start, end) in `text`, or undefined. */
function findIn(text: string, from: number, pattern: Pattern): [number, number] | undefined {
  if (pattern.literal !== undefined) {
    const at = text.indexOf(pattern.literal, from);
    return at === -1 ? undefined : [at, at + pattern.literal.length];
  }
  pattern.regex.lastIndex = from;
  const found = pattern.regex.exec(text);
  return found ? [found.index, found.index + found[0].length] : undefined;
}

interface TextScan {
  firstLine: number;
  recent: string[];
  /** Matches of the previous chunk still short of after-context. */
  waiting: LineMatch[];
  /** The file ends with this text: no more after-context will come. */
  eof: boolean;
  emit: (match: LineMatch) => void;
  /** Counts a found line; false: stop searching (a limit was reached). */
  found: () => boolean;
}

/**
 * Searches decoded complete lines; first fills the previous chunk's last
 * matches' after-context. A match short of after-context waits for the next
 * chunk, and so does every later one, so matches go out in order.
 */
function scanText(text: string, pattern: Pattern, context: number, scan: TextScan): { nextLine: number; recent: string[]; pending: LineMatch[] } {
  if (scan.waiting.length > 0) {
    const head = firstLinesOf(text, context);
    for (const match of scan.waiting) {
      match.after.push(...head.slice(0, context - match.after.length));
      scan.emit(match);
    }
  }
  const pending: LineMatch[] = [];
  let line = scan.firstLine;
  let counted = 0;
  let from = 0;
  while (from <= text.length) {
    const found = findIn(text, from, pattern);
    // A match after the final newline (`^`, `$`, an empty pattern) is on a line that does not exist.
    if (!found || (found[0] === text.length && (text.length === 0 || text.endsWith('\n')))) break;
    const start = text.lastIndexOf('\n', found[0] - 1) + 1;
    let end = text.indexOf('\n', found[0]);
    if (end === -1) end = text.length;
    let column = found[0];
    if (found[1] > end) {
      // The match ran over the line end (`\s` matched the newline): does the line match alone?
      pattern.lineRegex.lastIndex = 0;
      const alone = pattern.lineRegex.exec(text.slice(start, end));
      if (!alone) {
        from = end + 1;
        continue;
      }
      column = start + alone.index;
    }
    for (let at = text.indexOf('\n', counted); at !== -1 && at < start; at = text.indexOf('\n', at + 1)) line++;
    counted = start;
    const match: LineMatch = {
      line,
      column: Buffer.byteLength(text.slice(start, column)) + 1,
      text: cut(text.slice(start, end)),
      before: context > 0 ? beforeLines(text, start, context, scan.recent) : [],
      after: context > 0 ? firstLinesOf(text.slice(end + 1), context) : [],
    };
    if (pending.length > 0 || (match.after.length < context && !scan.eof)) pending.push(match);
    else scan.emit(match);
    from = end + 1;
    if (!scan.found()) break;
  }
  for (let at = text.indexOf('\n', counted); at !== -1; at = text.indexOf('\n', at + 1)) line++;
  return { nextLine: line, recent: context > 0 ? lastLines(text, context, scan.recent) : scan.recent, pending };
}

function firstLinesOf(text: string, count: number): string[] {
  const lines: string[] = [];
  let start = 0;
  while (lines.length < count && start < text.length) {
    let end = text.indexOf('\n', start);
    if (end === -1) end = text.length;
    lines.push(cut(text.slice(start, end)));
    start = end + 1;
  }
  return lines;
}

function beforeLines(text: string, start: number, count: number, recent: string[]): string[] {
  const lines: string[] = [];
  let end = start - 1;
  while (lines.length < count && end >= 0) {
    const from = text.lastIndexOf('\n', end - 1) + 1;
    lines.unshift(cut(text.slice(from, end)));
    end = from - 1;
  }
  return lines.length >= count ? lines : [...recent.slice(-(count - lines.length)), ...lines];
}
