import { Readable, type Writable } from 'node:stream';
import { BufferRing } from '../buffer-ring.js';
import type { Owner } from '../paths.js';
import { BLOCK } from './format.js';
import { CHUNK_BYTES, tarPieces } from './write.js';

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
  private readonly ring: BufferRing;
  private readonly pieces: AsyncGenerator<Buffer>;

  /**
   * `chunkBytes`: the piece size (tarPieces). `sliceBytes`: each piece is
   * handed on in slices of this size (views, not copies), for gzip, which
   * compresses a whole write before it looks at backpressure: a stalled
   * client then pins a slice's output, not a piece's (issue 36, item 9).
   */
  constructor(
    root: string,
    owner?: Owner,
    chunkBytes = CHUNK_BYTES,
    private readonly sliceBytes = Infinity,
  ) {
    // No read-ahead: a stalled client pins the one piece it has not taken (issue 36, item 9).
    super({ highWaterMark: 0 });
    this.ring = new BufferRing(chunkBytes + BLOCK);
    this.pieces = tarPieces(root, (size) => this.ring.take(size, this.dest ? this.readableLength + this.dest.writableLength : Infinity), owner, chunkBytes);
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
        // Slices wait in this stream's buffer, so the ring counts them as held until taken.
        for (let at = 0; at < next.value.length; at += this.sliceBytes) this.push(next.value.subarray(at, at + this.sliceBytes));
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
