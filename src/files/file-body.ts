import type { FileHandle } from 'node:fs/promises';
import { Readable, type Writable } from 'node:stream';
import { conflict, errnoToHttpError, badRequest, HttpError } from '../errors.js';
import { BufferRing } from './buffer-ring.js';
import { DOWNLOAD_CHUNK_BYTES } from './chunk-size.js';

/**
 * A read that fails before anything is sent (a special file such as
 * /proc/self/mem answers EIO) is the client's request for something that
 * cannot be read as bytes: known errnos keep their usual answer (EACCES 403,
 * EISDIR 400...), any other is 400 naming the path and errno.
 */
export function readError(error: unknown, path: string): unknown {
  const mapped = errnoToHttpError(error, path);
  if (mapped !== error || error instanceof HttpError) return mapped;
  const code = (error as NodeJS.ErrnoException | undefined)?.code ?? 'unknown error';
  return badRequest(`${path}: cannot be read (${code})`);
}

/**
 * The bytes of a download, read from one open handle in DOWNLOAD_CHUNK_BYTES
 * chunks: `length` bytes from `position`, or to EOF when `length` is
 * undefined. Never more than `length` (a file growing meanwhile cannot push the
 * body past its Content-Length); fewer is an error (a file shrinking
 * meanwhile), so the connection is aborted rather than ended as if complete.
 *
 * Read buffers are recycled (BufferRing) once the response they were piped
 * into has handed every byte up to them to the kernel.
 *
 * The handle is closed when the body ends or is destroyed.
 */
export class FileBody extends Readable {
  private dest: Writable | undefined;
  private readonly ring = new BufferRing(DOWNLOAD_CHUNK_BYTES);

  private constructor(
    private readonly handle: FileHandle,
    private readonly path: string,
    private position: number,
    private left: number,
    private readonly exact: boolean,
  ) {
    // No read-ahead: a chunk is read when the response has taken the one before, so a client that
    // stops reading pins one chunk (its pending write), not two (issue 36, item 9).
    super({ highWaterMark: 0 });
  }

  /**
   * Reads the first chunk before the answer is chosen, so that a file that
   * cannot be read is an ordinary `{ message }` error (the handle then
   * closed). `empty`: there was nothing to read.
   */
  static async open(handle: FileHandle, path: string, position: number, length: number | undefined): Promise<{ body: FileBody; empty: boolean }> {
    const body = new FileBody(handle, path, position, length ?? Infinity, length !== undefined);
    try {
      const first = await body.readChunk(Buffer.allocUnsafe(Math.min(DOWNLOAD_CHUNK_BYTES, body.left)));
      if (first) body.pushChunk(first);
      else body.push(null);
      return { body, empty: !first };
    } catch (error) {
      body.destroy();
      throw error;
    }
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    this.dest = destination as unknown as Writable;
    return super.pipe(destination, options);
  }

  override _read(): void {
    if (this.left === 0) return void this.push(null);
    this.readChunk(this.takeBuffer(Math.min(DOWNLOAD_CHUNK_BYTES, this.left))).then(
      (chunk) => {
        if (this.destroyed) return;
        if (chunk) this.pushChunk(chunk);
        else this.push(null);
      },
      (error: unknown) => this.destroy(error as Error),
    );
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.handle.close().then(
      () => callback(error),
      () => callback(error),
    );
  }

  /** Reads into `buffer`; undefined at EOF. */
  private async readChunk(buffer: Buffer): Promise<Buffer | undefined> {
    if (this.left === 0) return undefined;
    let bytesRead: number;
    try {
      ({ bytesRead } = await this.handle.read(buffer, 0, buffer.length, this.position));
    } catch (error) {
      throw readError(error, this.path);
    }
    if (bytesRead === 0) {
      if (this.exact) throw conflict(`${this.path}: ended ${this.left} bytes short of its size while being read (truncated meanwhile)`);
      return undefined;
    }
    this.position += bytesRead;
    this.left -= bytesRead;
    return bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead);
  }

  private pushChunk(chunk: Buffer): void {
    this.ring.pushed(chunk);
    this.push(chunk);
  }

  /** A buffer to read into: the response's writableLength says what it still holds. */
  private takeBuffer(size: number): Buffer {
    return this.ring.take(size, this.dest ? this.readableLength + this.dest.writableLength : Infinity);
  }
}
