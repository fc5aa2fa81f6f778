import type { Stats } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { badRequest, errnoToHttpError } from '../errors.js';

/**
 * Opens a path for reading and describes what was opened: missing is 404, a
 * directory, FIFO or socket 400. Reads then go through this one handle, so what is sent is
 * the file that was checked even if the path is replaced meanwhile.
 * The caller owns the handle.
 */
export async function openReadable(path: string): Promise<{ handle: FileHandle; stats: Stats }> {
  // Before opening: opening a FIFO blocks a thread-pool thread until a writer appears, and a socket cannot be opened.
  const kind = await stat(path).catch((error: unknown) => {
    throw errnoToHttpError(error, path);
  });
  if (kind.isFIFO() || kind.isSocket()) throw badRequest(`${path}: is a ${kind.isFIFO() ? 'FIFO' : 'socket'}, not a file that can be read`);
  let handle: FileHandle;
  try {
    handle = await open(path, 'r');
  } catch (error) {
    throw errnoToHttpError(error, path);
  }
  try {
    const stats = await handle.stat();
    if (stats.isDirectory()) throw badRequest(`${path}: is a directory`);
    return { handle, stats };
  } catch (error) {
    await handle.close();
    throw errnoToHttpError(error, path);
  }
}
