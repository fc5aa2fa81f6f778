import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, join, posix, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { extractArchive, hashedHere } from '../files/archive-extract.js';
import { TarBody } from '../files/tar/body.js';
import { ChecksumMismatch } from '../files/tar/checksums.js';
import { type Common, help, parse, UsageError, type Verb } from './args.js';
import { Progress } from './progress.js';

/** Where a --json run's progress goes: nowhere (a stream that is no terminal). */
const NO_TTY = { isTTY: false } as NodeJS.WriteStream;

/** Remote paths are written `:/path` (as scp's `host:/path` with no host). */
const remote = (path: string) => (path.startsWith(':') ? path.slice(1) : undefined);

/** A transfer whose bytes differ on the two ends: never reported as a success. */
function checkSame(what: string, sent: string, received: string): void {
  if (sent !== received) throw new Error(`${what}: the bytes sent (sha256 ${sent.slice(0, 12)}…) are not those received (sha256 ${received.slice(0, 12)}…): copy again; if it repeats, report it`);
}

const LOCAL_ERRNOS: Record<string, string> = {
  EACCES: 'permission denied: copy into a directory you can write',
  EPERM: 'permission denied: copy into a directory you can write',
  EROFS: 'a read-only file system: copy somewhere writable',
  ENOSPC: 'no space left on this disk: free some, or copy elsewhere',
  ENOENT: 'no such directory here: create it first, or give an existing one',
  ENOTDIR: 'a part of the path is a file, not a directory',
  EEXIST: 'something is in the way there',
};

/** A local file system error while writing `target`: one line naming the path given and what to do, not Node's text with temporary names. */
async function writingLocally<T>(target: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (typeof (error as NodeJS.ErrnoException).syscall === 'string' && code && LOCAL_ERRNOS[code]) throw new Error(`cannot write ${target}: ${LOCAL_ERRNOS[code]} (${code})`);
    throw error;
  }
}

export const cp: Verb = async (argv, common) => {
  const { values, positionals } = parse('cp', argv, {});
  if (values.help || positionals.length !== 2) return help('cp', common, !values.help);
  const [src, dst] = positionals as [string, string];
  const from = remote(src);
  const to = remote(dst);
  if ((from === undefined) === (to === undefined)) throw new UsageError('cp: exactly one of SRC and DST is remote (:/path)');
  const progressTo = common.json ? NO_TTY : process.stderr;
  let files: number;
  if (from !== undefined) {
    const info = await common.client.files.info(from);
    const local = await stat(dst).catch(() => undefined);
    // Into an existing directory under the source's name, as cp does; otherwise as the name given.
    const target = local?.isDirectory() ? join(dst, posix.basename(from)) : dst;
    files = await writingLocally(target, () => (info.type === 'dir' ? pullTree(common, from, target, progressTo) : pullFile(common, from, target, progressTo)));
  } else {
    const local = await stat(src).catch(() => undefined);
    if (!local) throw new Error(`${src}: no such file or directory here (a remote source is written :${src})`);
    const exists = await common.client.files.info(to!).catch(() => undefined);
    const target = exists?.type === 'dir' ? posix.join(to!, basename(src)) : to!;
    files = local.isDirectory() ? await pushTree(common, src, target, progressTo) : await pushFile(common, src, target, local.size, progressTo);
  }
  if (common.json) common.out(`${JSON.stringify({ files })}\n`);
  return 0;
};

/** One file down, streamed to disk and counted for the progress line; its sha256 checked against envd's of the file. */
async function pullFile(common: Common, from: string, target: string, progressTo: NodeJS.WriteStream): Promise<number> {
  const response = await common.client.files.download(from);
  const progress = new Progress(from, Number(response.headers.get('content-length') ?? NaN) || undefined, progressTo);
  const hash = createHash('sha256');
  try {
    await pipeline(Readable.fromWeb(response.body as never), progress.counter(hash), createWriteStream(target));
  } finally {
    progress.end();
  }
  const there = await common.client.files.info(from, { checksum: 'sha256' });
  checkSame(`${from} (or it changed while copied)`, there.sha256 ?? '', hash.digest('hex'));
  return 1;
}

/**
 * A whole tree down in one request (GET /files/archive), extracted with
 * envd's own all-or-nothing extraction: a hostile or broken archive from a
 * sandbox cannot write outside `target` or leave half a tree; an existing
 * target is merged into. Asked for with each file's sha256 in the stream
 * (tar/checksums.ts), each file is checked as it is extracted: a byte changed
 * on the way is an error naming the file, and nothing is written.
 */
async function pullTree(common: Common, from: string, target: string, progressTo: NodeJS.WriteStream): Promise<number> {
  const response = await common.client.files.downloadArchive(from, { sha256: true });
  const progress = new Progress(from, undefined, progressTo);
  try {
    const exists = (await stat(target).catch(() => undefined)) !== undefined;
    const body = Readable.fromWeb(response.body as never).pipe(progress.counter());
    return (await extractArchive(hashedHere(body), resolve(target), exists ? 'merge' : 'create', { keepSetId: false, verifyChecksums: true })).files;
  } catch (error) {
    if (error instanceof ChecksumMismatch) throw new Error(`${from}: ${error.message}; nothing was written: copy again; if it repeats, report it`);
    throw error;
  } finally {
    progress.end();
  }
}

/** One file up, streamed from disk: a large file never sits whole in memory. envd's sha256 of what it wrote must be that of what was sent. */
async function pushFile(common: Common, path: string, target: string, size: number, progressTo: NodeJS.WriteStream): Promise<number> {
  const progress = new Progress(path, size, progressTo);
  const hash = createHash('sha256');
  try {
    const body = Readable.toWeb(createReadStream(path, { highWaterMark: 1024 * 1024 }).pipe(progress.counter(hash))) as unknown as ReadableStream<Uint8Array>;
    const written = await common.client.files.upload(target, body);
    checkSame(target, hash.digest('hex'), written.sha256);
  } finally {
    progress.end();
  }
  return 1;
}

/** A whole tree up in one request: written as tar while it is sent, extracted by envd all or nothing (merged into an existing target); envd's sha256 of the archive it read must be that of the one sent. */
async function pushTree(common: Common, path: string, target: string, progressTo: NodeJS.WriteStream): Promise<number> {
  const progress = new Progress(path, undefined, progressTo);
  const hash = createHash('sha256');
  try {
    const exists = await common.client.files.exists(target);
    const tar = new TarBody(path).pipe(progress.counter(hash));
    const body = Readable.toWeb(tar) as unknown as ReadableStream<Uint8Array>;
    const extracted = await common.client.files.uploadArchive(target, body, { mode: exists ? 'merge' : 'create' });
    checkSame(target, hash.digest('hex'), extracted.sha256);
    return extracted.files;
  } finally {
    progress.end();
  }
}
