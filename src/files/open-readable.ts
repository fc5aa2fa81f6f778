import type { Stats } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import type { Owner } from './paths.js';
import { openRegular } from './user-file.js';

/**
 * Opens a path for reading and describes what was opened: missing is 404; a
 * directory, FIFO, socket or device 400 (user-path.ts's openRegular: checked
 * with fstat before a byte is read, never blocking). Reads then go through this
 * one handle, so what is sent is the file that was checked even if the path
 * is replaced meanwhile. The caller owns the handle.
 */
export async function openReadable(path: string, owner?: Owner): Promise<{ handle: FileHandle; stats: Stats }> {
  return openRegular(path, owner);
}
