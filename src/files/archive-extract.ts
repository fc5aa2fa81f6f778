import { createHash, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { chmod, lstat, mkdir, open, readdir, rename, rm, rmdir, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { badRequest, conflict, HttpError } from '../errors.js';
import { openTargetParent, pathOfDescriptor, removeMadeParents, type TargetParent } from './archive-anchor.js';
import { EntryWriter } from './archive-entries.js';
import { checkMerge, moveInto } from './archive-merge.js';
import { readAhead } from './read-ahead.js';
import type { Owner } from './paths.js';
import { TarFormatError } from './tar/format.js';
import { verifyingChecksums } from './tar/checksums.js';
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

export interface ExtractOptions {
  /** Who everything made belongs to, the target's missing parents included; undefined: whoever envd runs as. */
  owner?: Owner | undefined;
  /** Keep setuid and setgid bits: only where root extracts for root (never for `envd cp`, whose archive comes from a sandbox). */
  keepSetId?: boolean;
  /** Check each file against the sha256 the archive carries (GET /files/archive?sha256=true; tar/checksums.ts): a difference throws ChecksumMismatch and nothing is written. */
  verifyChecksums?: boolean;
}

/** Targets being extracted into now: a second archive for the same one is a 409, not a race of renames. */
const extracting = new Set<string>();

/**
 * Extracts a streamed tar or tar.gz (told apart by gzip's magic bytes) into
 * `dir`, all or nothing: into a temporary sibling `.envd-archive-*`, renamed
 * into place (`create`: `dir` must not exist; `replace`: the old tree is
 * swapped out whole) or moved in entry by entry (`merge`, checked whole
 * first: see archive-merge.ts) only once the whole archive was read and
 * every entry was accepted. Any refusal or error removes the temporary tree
 * and the parents it made: nothing is left behind. A malformed or truncated
 * archive is a 400; what each entry may be is EntryWriter's to say.
 *
 * The temporary directory is root's and 0700 while it fills (when envd is
 * root), and named through its descriptor: no user can enter it, and one
 * who renames it away and puts a symlink in its place steers nothing.
 */
export async function extractArchive(body: ArchiveBody, dir: string, mode: ExtractMode, options: ExtractOptions = {}): Promise<Extracted> {
  if (extracting.has(dir)) throw conflict(`path: another archive is being extracted into ${dir}; retry once it has finished`);
  extracting.add(dir);
  try {
    return await extractAlone(body, dir, mode, options);
  } finally {
    extracting.delete(dir);
  }
}

async function extractAlone(body: ArchiveBody, dir: string, mode: ExtractMode, { owner, keepSetId = false, verifyChecksums = false }: ExtractOptions): Promise<Extracted> {
  // The target's parent, walked without following what another user can change, made as needed (the owner's).
  const { parent, created } = await openTargetParent(dir, owner);
  const tempName = `.envd-archive-${randomBytes(6).toString('hex')}`;
  let anchor: FileHandle | undefined;
  let writer: EntryWriter | undefined;
  try {
    const existing = await lstat(parent.at(parent.name)).catch(absent);
    if (existing && !existing.isDirectory()) throw conflict(`path: ${dir} exists and is not a directory`);
    if (existing && mode === 'create') throw conflict(`path: ${dir} exists; use mode=merge or mode=replace`);
    await mkdir(parent.at(tempName), { mode: 0o700 });
    anchor = await open(parent.at(tempName), constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW).catch(() => {
      throw conflict(`path: the temporary directory ${parent.child(tempName)} was replaced before envd opened it; nothing was written`);
    });
    const made = await anchor.stat();
    const root = pathOfDescriptor(anchor, parent.at(tempName));
    // No chown per entry where what envd creates has the owner's ids already: the temporary tree is
    // theirs and passes on no other group (no set-group-id bit). A directory the archive makes is
    // created the same way, so its entries are too.
    const ownedAlready = owner !== undefined && made.uid === owner.uid && made.gid === owner.gid && (made.mode & 0o2000) === 0;
    writer = new EntryWriter(root, { owner: ownedAlready ? undefined : owner, keepSetId });
    const { chunks, gzipped } = await openBody(body);
    await readTar(gzipped ? gunzip(chunks) : chunks, verifyChecksums ? verifyingChecksums(writer) : writer);
    writer.finish();
    const merging = existing !== undefined && mode === 'merge';
    const target = parent.at(parent.name);
    if (merging) await checkMerge(root, target, dir, writer.directories);
    // A plain user cannot move a directory without write permission into another (its `..` changes):
    // their merge sets modes once moved. Root sets them here, inside the tree no one else can enter.
    const settleAfterMerge = merging && process.geteuid?.() !== 0;
    if (!settleAfterMerge) writer.settleDirectories();
    await anchor.chmod(0o755);
    if (owner) await anchor.chown(owner.uid, owner.gid);
    const sha256 = await body.sha256();
    if (merging) {
      await moveInto(root, target, dir);
      if (settleAfterMerge) writer.settleDirectories(target);
      await removeTemporary(parent, tempName, made, root);
    } else await place(parent, tempName, made, dir, existing !== undefined);
    return { path: dir, files: writer.files, bytes: writer.bytes, sha256 };
  } catch (error) {
    await writer?.abort();
    if (anchor) await removeTemporary(parent, tempName, await anchor.stat(), pathOfDescriptor(anchor, parent.at(tempName)));
    else await rmdir(parent.at(tempName)).catch(() => {});
    if (created) await removeMadeParents(dir, created, owner);
    if (error instanceof HttpError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (error instanceof TarFormatError || code === 'Z_DATA_ERROR' || code === 'Z_BUF_ERROR') {
      throw badRequest(`body: not a valid tar or tar.gz archive (${(error as Error).message})`);
    }
    throw error;
  } finally {
    await anchor?.close();
    await parent.close();
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

/**
 * The filled temporary tree renamed into place (create), or swapped for the
 * old one (replace), by names in the parent opened before. Someone else's
 * tree that got there first, or a temporary name moved away, is a 409; the
 * old tree comes back if the swap fails, and is removed without following anything.
 */
async function place(parent: TargetParent, tempName: string, made: Identity, dir: string, exists: boolean): Promise<void> {
  const now = await lstat(parent.at(tempName)).catch(absent);
  if (!sameFile(now, made)) throw conflict(`path: the temporary directory ${parent.child(tempName)} was moved away; nothing was written`);
  if (!exists) {
    await rename(parent.at(tempName), parent.at(parent.name)).catch(raced(dir));
    return;
  }
  const old = `${tempName}-old`;
  await rename(parent.at(parent.name), parent.at(old)).catch(raced(dir));
  try {
    await rename(parent.at(tempName), parent.at(parent.name));
  } catch (error) {
    await rename(parent.at(old), parent.at(parent.name)).catch(() => {});
    raced(dir)(error as NodeJS.ErrnoException);
  }
  await parent.removeTree(old);
}

/** A rename that lost to another writer of the same path: a 409. */
function raced(dir: string): (error: NodeJS.ErrnoException) => never {
  return (error) => {
    const code = error.code;
    if (code === 'EEXIST' || code === 'ENOTEMPTY' || code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR') {
      throw conflict(`path: ${dir} was changed by someone else meanwhile (${code}); nothing was written`);
    }
    throw error;
  };
}

type Identity = { ino: number; dev: number };
const sameFile = (a: Identity | undefined, b: Identity) => a !== undefined && a.ino === b.ino && a.dev === b.dev;

function absent(error: NodeJS.ErrnoException): undefined {
  if (error.code === 'ENOENT') return undefined;
  throw error;
}

/**
 * The temporary tree removed: its contents through its descriptor (`root`:
 * root's 0700 tree, no one else's), then its name, if that is still the
 * directory made. A plain user's tree may hold directories they cannot
 * write (0555, set last): made writable first.
 */
async function removeTemporary(parent: TargetParent, tempName: string, made: Identity, root: string): Promise<void> {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      for (const name of await readdir(root)) await rm(join(root, name), { recursive: true, force: true });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EACCES' || attempt > 0) break;
      await makeWritable(root);
    }
  }
  if (sameFile(await lstat(parent.at(tempName)).catch(() => undefined), made)) await rmdir(parent.at(tempName)).catch(() => {});
}

async function makeWritable(dir: string): Promise<void> {
  await chmod(dir, 0o700).catch(() => {});
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (entry.isDirectory()) await makeWritable(join(dir, entry.name));
  }
}
