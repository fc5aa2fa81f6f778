import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chown, lchown, link, lstat, lutimes, mkdir, open, readdir, rename, rm, statfs, symlink, utimes } from 'node:fs/promises';
import { dirname, join, normalize, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { extract, type Extract, type Header } from 'tar-stream';
import { badRequest, conflict, HttpError } from '../errors.js';
import type { Owner } from './paths.js';

export type ExtractMode = 'create' | 'merge' | 'replace';

/** Free space an archive must leave on the disk: the sandbox's own work needs some too. */
const DISK_RESERVE_BYTES = 64 * 1024 * 1024;

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
 * the temporary tree: nothing is left behind.
 *
 * Refused with a 400 naming the entry: absolute names, `..` leaving the tree,
 * symlinks whose target resolves outside it, hard links to anything but a
 * regular file extracted before, device nodes and fifos, a malformed or
 * truncated archive. 413 when an entry would leave less than 64 MiB free on
 * the disk (a gzip bomb stops there; no ratio guesses).
 */
export async function extractArchive(body: Readable, dir: string, mode: ExtractMode, owner: Owner | undefined): Promise<Extracted> {
  const existing = await lstat(dir).catch(() => undefined);
  if (existing && !existing.isDirectory()) throw conflict(`path: ${dir} exists and is not a directory`);
  if (existing && mode === 'create') throw conflict(`path: ${dir} exists; use mode=merge or mode=replace`);
  const parent = dirname(dir);
  await mkdir(parent, { recursive: true });
  const temp = join(parent, `.envd-archive-${randomBytes(6).toString('hex')}`);
  await mkdir(temp, { mode: 0o755 });
  const counted: Counted = { files: 0, bytes: 0, dirTimes: [] };
  try {
    const hash = createHash('sha256');
    const { source, gzipped } = await openBody(body, hash);
    await readInto(gzipped ? source.pipe(createGunzip()) : source, extractInto(temp, owner, counted), source);
    // Directory mtimes last: writing their entries changed them.
    for (const [path, time] of counted.dirTimes) await utimes(path, time, time).catch(() => {});
    if (owner) await chown(temp, owner.uid, owner.gid);
    await place(temp, dir, mode, existing !== undefined);
    return { path: dir, files: counted.files, bytes: counted.bytes, sha256: hash.digest('hex') };
  } catch (error) {
    await counted.current?.catch(() => {});
    await rm(temp, { recursive: true, force: true });
    if (error instanceof HttpError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'Z_DATA_ERROR' || code === 'Z_BUF_ERROR' || /tar|header|Unexpected end/i.test((error as Error).message)) {
      throw badRequest(`body: not a valid tar or tar.gz archive (${(error as Error).message})`);
    }
    throw error;
  }
}

/** The body as a stream that also feeds `hash`, and whether it is gzipped (its first two bytes). */
async function openBody(body: Readable, hash: ReturnType<typeof createHash>): Promise<{ source: Readable; gzipped: boolean }> {
  const chunks = body[Symbol.asyncIterator]();
  const first = await chunks.next();
  async function* all(): AsyncGenerator<Buffer> {
    if (first.done) return;
    hash.update(first.value as Buffer);
    yield first.value as Buffer;
    for (;;) {
      const next = await chunks.next();
      if (next.done) return;
      hash.update(next.value as Buffer);
      yield next.value as Buffer;
    }
  }
  const head = first.done ? undefined : (first.value as Buffer);
  return { source: Readable.from(all(), { objectMode: false }), gzipped: head !== undefined && head[0] === 0x1f && head[1] === 0x8b };
}

/** A tar-stream extractor that writes each accepted entry under `root`, counting files and bytes. */
/** An entry's bytes (tar-stream's streamx readable): read to the end or resumed to skip. */
type EntryStream = Readable;

/**
 * Feeds the archive to the extractor until it finishes or anything fails. By
 * hand, not stream.pipeline: tar-stream's extractor is a streamx stream, whose
 * late errors ("Unexpected end of data" from a truncated archive) pipeline
 * let through as uncaught exceptions.
 */
function readInto(archive: Readable, tar: Extract, body: Readable): Promise<void> {
  return new Promise((resolve, reject) => {
    tar.on('error', reject);
    tar.on('finish', () => resolve());
    const fail = (error: Error) => tar.destroy(error);
    archive.on('error', fail);
    body.on('error', fail);
    archive.pipe(tar as unknown as NodeJS.WritableStream);
  });
}

interface Counted {
  files: number;
  bytes: number;
  /** Directories and their mtimes, set once everything is written. */
  dirTimes: Array<[string, Date]>;
  /** Directories this extraction made or checked (no symlink on their way): not checked again per entry. */
  knownDirs?: Set<string>;
  /** The entry being written: waited for before a failed extraction's tree is removed, so it cannot recreate it. */
  current?: Promise<void>;
}

function extractInto(root: string, owner: Owner | undefined, counted: Counted): Extract {
  const tar = extract();
  const regular = new Set<string>();
  counted.knownDirs = new Set([root]);
  tar.on('entry', (header: Header, stream, next) => {
    // The extractor's own error (a refusal, a truncated archive) also fails the entry under way: it is reported once, by readInto.
    stream.on('error', () => {});
    counted.current = accept(root, header, stream as unknown as EntryStream, regular, owner, counted).catch((error: unknown) => {
      throw entryError(header.name, error);
    });
    counted.current.then(
      () => next(),
      (error: unknown) => tar.destroy(error as Error),
    );
  });
  return tar;
}

async function accept(
  root: string,
  header: Header,
  stream: EntryStream,
  regular: Set<string>,
  owner: Owner | undefined,
  counted: Counted,
): Promise<void> {
  const name = header.name;
  const refuse = (why: string) => {
    stream.resume();
    return badRequest(`archive entry ${JSON.stringify(name)}: ${why}; nothing was written`);
  };
  if (name.includes('\0')) throw refuse('a NUL byte in its name');
  if (name.startsWith('/')) throw refuse('an absolute path');
  const relativeName = normalize(name).replace(/\/+$/, '');
  if (relativeName === '..' || relativeName.startsWith(`..${sep}`)) throw refuse('it leaves the directory (..)');
  if (relativeName === '.' || relativeName === '') {
    stream.resume();
    return;
  }
  const target = join(root, relativeName);
  const mode = (header.mode ?? 0o644) & 0o7777;
  const parent = dirname(target);
  if (!counted.knownDirs!.has(parent)) {
    await mkdir(parent, { recursive: true });
    if (await escapesThroughSymlink(root, parent)) throw refuse('a directory on its path is a symlink');
    counted.knownDirs!.add(parent);
  }
  switch (header.type) {
    case 'directory':
      if ((await lstat(target).catch(() => undefined))?.isSymbolicLink()) throw refuse('a directory where the archive made a symlink');
      await mkdir(target, { recursive: true, mode });
      counted.knownDirs!.add(target);
      stream.resume();
      if (header.mtime) counted.dirTimes.push([target, header.mtime]);
      break;
    case 'file':
    case 'contiguous-file': {
      const size = header.size ?? 0;
      await ensureRoom(root, size, name);
      await writeEntry(target, stream, size, mode, header.mtime);
      regular.add(relativeName);
      counted.files++;
      counted.bytes += header.size ?? 0;
      break;
    }
    case 'symlink': {
      const linkname = header.linkname ?? '';
      if (linkname.startsWith('/')) throw refuse(`a symlink to an absolute path (${linkname})`);
      if (!inside(root, resolve(dirname(target), linkname))) throw refuse(`a symlink out of the directory (${linkname})`);
      stream.resume();
      await symlink(linkname, target);
      if (header.mtime) await lutimes(target, header.mtime, header.mtime).catch(() => {});
      break;
    }
    case 'link': {
      const to = normalize(header.linkname ?? '').replace(/\/+$/, '');
      if (!regular.has(to)) throw refuse(`a hard link to ${JSON.stringify(header.linkname)}, which is not a file extracted before it`);
      stream.resume();
      await link(join(root, to), target);
      counted.files++;
      break;
    }
    default:
      throw refuse(`a ${header.type} (only files, directories, symlinks and hard links are extracted)`);
  }
  if (owner && header.type !== 'link') await chownEntry(target, owner);
}

/**
 * What writing an entry ran into, as the client's error: the disk full is a
 * 507; any other refusal of the file system (a name too long, a file where
 * the archive wants a directory, a loop) is the archive's, a 400 naming the entry.
 */
function entryError(name: string, error: unknown): unknown {
  if (error instanceof HttpError) return error;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new HttpError(507, `archive entry ${JSON.stringify(name)}: the disk is full (${code}); nothing was written`);
  if (code !== undefined && /^E[A-Z]+$/.test(code)) return badRequest(`archive entry ${JSON.stringify(name)}: cannot be written (${code}); nothing was written`);
  return error;
}

/** Small files in one write (most of a source tree), large ones streamed; never through an existing symlink ('wx'). */
async function writeEntry(target: string, stream: EntryStream, size: number, mode: number, mtime: Date | undefined): Promise<void> {
  if (size <= SMALL_FILE_BYTES) {
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    let handle = await open(target, 'wx', mode).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
      await rm(target, { force: true });
      return open(target, 'wx', mode);
    });
    try {
      await handle.writeFile(Buffer.concat(chunks, size));
      if (mtime) await handle.utimes(mtime, mtime);
    } finally {
      await handle.close();
    }
    return;
  }
  await rm(target, { force: true }).catch(() => {});
  await pipeline(stream as unknown as Readable, createWriteStream(target, { mode, flags: 'wx', highWaterMark: 1024 * 1024 }));
  if (mtime) await utimes(target, mtime, mtime);
}

/** Up to this size an entry is gathered in memory and written at once (one entry at a time: bounded). */
const SMALL_FILE_BYTES = 256 * 1024;

async function chownEntry(path: string, owner: Owner): Promise<void> {
  await lchown(path, owner.uid, owner.gid);
}

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(`${root}${sep}`);
}

/** Whether a directory an entry goes into is reached through a symlink the archive made (a later entry writing through it). */
async function escapesThroughSymlink(root: string, dir: string): Promise<boolean> {
  for (let at = dir; inside(root, at) && at !== root; at = dirname(at)) {
    if ((await lstat(at)).isSymbolicLink()) return true;
  }
  return false;
}

/** 413 when writing `bytes` more would leave the disk with less than its reserve. */
async function ensureRoom(root: string, bytes: number, name: string): Promise<void> {
  const disk = await statfs(root);
  const free = disk.bavail * disk.bsize;
  if (bytes > free - DISK_RESERVE_BYTES) {
    throw new HttpError(413, `archive entry ${JSON.stringify(name)}: ${bytes} bytes would leave less than ${DISK_RESERVE_BYTES} bytes free on the disk (${free} free); nothing was written`);
  }
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

