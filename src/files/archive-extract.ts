import { createHash, randomBytes } from 'node:crypto';
import { chown, lstat, mkdir, readdir, rename, rm, utimes } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { badRequest, conflict, HttpError } from '../errors.js';
import { EntryWriter } from './archive-entries.js';
import { readAhead } from './read-ahead.js';
import type { Owner } from './paths.js';
import { TarFormatError } from './tar/format.js';
import { readTar } from './tar/read.js';

export type ExtractMode = 'create' | 'merge' | 'replace';

/** How far the body is read ahead of the extraction (see readAhead), whether it comes from the request or the relay. */
export const READ_AHEAD_BYTES = 1024 * 1024;

export interface Extracted {
  path: string;
  files: number;
  bytes: number;
  /** sha256 of the archive as it arrived (gzipped or not). */
  sha256: string;
}

/**
 * Extracts a streamed tar or tar.gz (told apart by gzip's magic bytes) into
 * `dir`, all or nothing: into a temporary sibling `.envd-archive-*`, renamed
 * into place (`create`: `dir` must not exist; `replace`: the old tree is
 * swapped out whole) or moved in entry by entry (`merge`) only once the whole
 * archive was read and every entry was accepted. Any refusal or error removes
 * the temporary tree: nothing is left behind. A malformed or truncated archive
 * is a 400; what each entry may be is EntryWriter's to say.
 */
export async function extractArchive(body: ArchiveBody, dir: string, mode: ExtractMode, owner: Owner | undefined): Promise<Extracted> {
  const existing = await lstat(dir).catch(() => undefined);
  if (existing && !existing.isDirectory()) throw conflict(`path: ${dir} exists and is not a directory`);
  if (existing && mode === 'create') throw conflict(`path: ${dir} exists; use mode=merge or mode=replace`);
  const parent = dirname(dir);
  await mkdir(parent, { recursive: true });
  const temp = join(parent, `.envd-archive-${randomBytes(6).toString('hex')}`);
  await mkdir(temp, { mode: 0o755 });
  // No chown per entry where what envd creates has the owner's ids already: the temporary tree is
  // theirs and passes on no other group (no set-group-id bit). A directory the archive makes is
  // created the same way, so its entries are too.
  const made = await lstat(temp);
  const ownedAlready = owner !== undefined && made.uid === owner.uid && made.gid === owner.gid && (made.mode & 0o2000) === 0;
  const writer = new EntryWriter(temp, ownedAlready ? undefined : owner);
  try {
    const { chunks, gzipped } = await openBody(body);
    await readTar(gzipped ? gunzip(chunks) : chunks, writer);
    // Directory mtimes last: writing their entries changed them.
    for (const [path, time] of writer.dirTimes) await utimes(path, time, time).catch(() => {});
    if (owner) await chown(temp, owner.uid, owner.gid);
    await place(temp, dir, mode, existing !== undefined);
    return { path: dir, files: writer.files, bytes: writer.bytes, sha256: await body.sha256() };
  } catch (error) {
    await writer.abort();
    await rm(temp, { recursive: true, force: true });
    if (error instanceof HttpError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (error instanceof TarFormatError || code === 'Z_DATA_ERROR' || code === 'Z_BUF_ERROR') {
      throw badRequest(`body: not a valid tar or tar.gz archive (${(error as Error).message})`);
    }
    throw error;
  }
}

/** An archive's bytes as they arrive, and their sha256 once all have. */
export interface ArchiveBody {
  /** The bytes in order, read ahead of the extraction. */
  chunks: AsyncIterator<Buffer>;
  /** The sha256 of every byte, once `chunks` has ended. */
  sha256(): Promise<string>;
}

/** A request body read here and hashed on the way (a large one with a Content-Length may come through the relay instead, archive-relay.ts). */
export function hashedHere(body: Readable): ArchiveBody {
  const hash = createHash('sha256');
  const iterator = readAhead(body, READ_AHEAD_BYTES);
  return {
    chunks: {
      async next() {
        const next = await iterator.next();
        if (!next.done) hash.update(next.value);
        return next;
      },
    },
    sha256: async () => hash.digest('hex'),
  };
}

/** The body's chunks, and whether they are gzipped (their first two bytes). */
async function openBody(body: ArchiveBody): Promise<{ chunks: AsyncIterable<Buffer>; gzipped: boolean }> {
  const first = await body.chunks.next();
  async function* all(): AsyncGenerator<Buffer> {
    for (let next = first; !next.done; next = await body.chunks.next()) yield next.value;
  }
  const head = first.done ? undefined : first.value;
  return { chunks: all(), gzipped: head !== undefined && head[0] === 0x1f && head[1] === 0x8b };
}

/** The chunks gunzipped; an error of either side ends the iteration with it. */
function gunzip(chunks: AsyncIterable<Buffer>): Readable {
  const source = Readable.from(chunks, { objectMode: false });
  const out = createGunzip();
  source.on('error', (error) => out.destroy(error));
  return source.pipe(out);
}

/** The extracted tree into place: renamed (create, replace), or moved in entry by entry (merge). */
async function place(temp: string, dir: string, mode: ExtractMode, exists: boolean): Promise<void> {
  if (!exists) return rename(temp, dir);
  if (mode === 'replace') {
    const old = `${temp}-old`;
    await rename(dir, old);
    await rename(temp, dir);
    await rm(old, { recursive: true, force: true });
    return;
  }
  await mergeInto(temp, dir);
  await rm(temp, { recursive: true, force: true });
}

async function mergeInto(from: string, to: string): Promise<void> {
  for (const name of await readdir(from)) {
    const source = join(from, name);
    const target = join(to, name);
    const [s, t] = await Promise.all([lstat(source), lstat(target).catch(() => undefined)]);
    if (s.isDirectory() && t?.isDirectory()) await mergeInto(source, target);
    else {
      if (t?.isDirectory()) await rm(target, { recursive: true, force: true });
      await rename(source, target);
    }
  }
}

