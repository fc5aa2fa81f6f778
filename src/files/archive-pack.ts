import { createReadStream } from 'node:fs';
import { lstat, opendir, readFile, readlink } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { pack, type Pack } from 'tar-stream';
import { badRequest, errnoToHttpError } from '../errors.js';
import { PassThrough, type Readable } from 'node:stream';

export type ArchiveFormat = 'tar' | 'tar.gz';

/**
 * A directory tree as a tar stream (gzipped for tar.gz): directories, regular
 * files and symlinks (not followed) with their modes, mtimes and owners; other
 * kinds (sockets, devices, fifos) are left out. One entry at a time, each
 * file's bytes piped with back-pressure: memory stays flat whatever the tree's
 * size. Checked before the first byte goes out: a missing path is a 404, a
 * file is a 400.
 */
export async function packDirectory(dir: string, format: ArchiveFormat): Promise<Readable> {
  const info = await lstat(dir).catch((error: NodeJS.ErrnoException) => {
    throw errnoToHttpError(error, dir);
  });
  if (!info.isDirectory()) throw badRequest(`path: ${dir} is not a directory`);
  const tar = pack();
  void addTree(tar, dir, dir).then(
    () => tar.finalize(),
    (error: unknown) => tar.destroy(error as Error),
  );
  // tar-stream's streams are streamx ones: a Node stream for fastify and for gzip.
  const out = format === 'tar' ? new PassThrough({ highWaterMark: 1024 * 1024 }) : createGzip({ level: 6 });
  void pipeline(tar as unknown as Readable, out).catch(() => {});
  return out;
}

async function addTree(tar: Pack, root: string, dir: string): Promise<void> {
  const names: string[] = [];
  for await (const entry of await opendir(dir)) names.push(entry.name);
  names.sort();
  // A directory's lstats in flight together: one thread-pool trip each, not one after the other.
  const infos = await Promise.all(names.map((name) => lstat(join(dir, name)).catch(() => undefined)));
  for (const [index, name] of names.entries()) {
    const path = join(dir, name);
    const info = infos[index];
    if (!info) continue; // gone meanwhile
    const header = { name: relative(root, path), mode: info.mode & 0o7777, mtime: info.mtime, uid: info.uid, gid: info.gid };
    if (info.isDirectory()) {
      await entry(tar, { ...header, type: 'directory' });
      await addTree(tar, root, path);
    } else if (info.isSymbolicLink()) {
      await entry(tar, { ...header, type: 'symlink', linkname: await readlink(path) });
    } else if (info.isFile()) {
      await addFile(tar, header, path, info.size);
    }
  }
}

/** Up to this size a file is read whole (one entry at a time: bounded). */
const SMALL_FILE_BYTES = 256 * 1024;

/** Exactly `size` bytes: cut, or padded with zeros, so the header stays true. */
function fitTo(bytes: Buffer, size: number): Buffer {
  if (bytes.length === size) return bytes;
  return bytes.length > size ? bytes.subarray(0, size) : Buffer.concat([bytes, Buffer.alloc(size - bytes.length)]);
}

function entry(tar: Pack, header: Parameters<Pack['entry']>[0]): Promise<void> {
  return new Promise((resolve, reject) => tar.entry(header, (error) => (error ? reject(error) : resolve())));
}

/** A file's first `size` bytes (its size when listed: a header cannot change once written). */
async function addFile(tar: Pack, header: Parameters<Pack['entry']>[0], path: string, size: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const done = (error?: Error | null) => (error ? reject(error) : resolve());
    if (size <= SMALL_FILE_BYTES) {
      // Most of a source tree: one read, one entry. A file that changed size meanwhile is sent as it was listed.
      readFile(path).then(
        (bytes) => tar.entry({ ...header, type: 'file', size }, fitTo(bytes, size), done),
        reject,
      );
      return;
    }
    const sink = tar.entry({ ...header, type: 'file', size }, done);
    const source = createReadStream(path, { start: 0, end: size - 1, highWaterMark: 1024 * 1024 });
    source.on('error', (error) => sink.destroy(error));
    source.pipe(sink as unknown as NodeJS.WritableStream);
  });
}
