import { Readable, type Writable } from 'node:stream';
import { BufferRing } from '../buffer-ring.js';
import type { Owner } from '../paths.js';
import { CHUNK_BYTES, PIECE_BYTES, tarPieces } from './write.js';

/**
 * A directory tree as a tar stream whose pieces are made in a few recycled
 * buffers (BufferRing): each piece only when the one before was taken, and
 * a buffer reused once the stream it is piped into (the response, or gzip)
 * has passed its bytes on. Memory stays a few MiB whatever the tree's size,
 * with no garbage for V8 to catch up with. Destroying it (the client left)
 * stops the walk and closes the file being read.
 */
export class TarBody extends Readable {
  private dest: Writable | undefined;
  private readonly ring = new BufferRing(PIECE_BYTES);
  private readonly pieces: AsyncGenerator<Buffer>;

  constructor(root: string, owner?: Owner) {
    super({ highWaterMark: CHUNK_BYTES });
    this.pieces = tarPieces(root, (size) => this.ring.take(size, this.dest ? this.readableLength + this.dest.writableLength : Infinity), owner);
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    this.dest = destination as unknown as Writable;
    return super.pipe(destination, options);
  }

  override _read(): void {
    this.pieces.next().then(
      (next) => {
        if (this.destroyed) return;
        if (next.done) return void this.push(null);
        this.ring.pushed(next.value);
        this.push(next.value);
      },
      (error: unknown) => this.destroy(error as Error),
    );
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.pieces.return(undefined).then(
      () => callback(error),
      () => callback(error),
    );
  }
}
