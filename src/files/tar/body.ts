import { OutgoingMessage } from 'node:http';
import { Socket } from 'node:net';
import { Readable, type Writable } from 'node:stream';
import { Gzip } from 'node:zlib';
import { BufferRing } from '../buffer-ring.js';
import type { Owner } from '../paths.js';
import { FileChecksums } from './checksums.js';
import { BLOCK } from './format.js';
import { CHUNK_BYTES, tarPieces } from './write.js';

/**
 * Whether `dest` is done with a chunk's bytes once its writableLength no
 * longer counts them: a socket or HTTP response has handed them to the
 * kernel, gzip has taken them into its window. Any other stream may still
 * hold the very same Buffer further on (a Transform passes it on to its
 * readable side, Readable.toWeb and fetch queue it again): reusing it there
 * rewrote bytes not yet sent (`envd cp` uploads carried a later file's
 * bytes in an earlier header, issue 44).
 */
function letsGoOfBytes(dest: Writable): boolean {
  return dest instanceof OutgoingMessage || dest instanceof Socket || dest instanceof Gzip;
}

/**
 * A directory tree as a tar stream whose pieces are made in a few recycled
 * buffers (BufferRing): each piece only when the one before was taken, and
 * a buffer reused once the stream it is piped into (the response, or gzip)
 * has passed its bytes on. Piped anywhere else (or read without pipe) each
 * piece is a fresh buffer. Memory stays a few MiB whatever the tree's size.
 * Destroying it (the client left) stops the walk and closes the file being read.
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
   * `checksums`: each file's sha256 in the stream (tar/checksums.ts).
   */
  constructor(
    root: string,
    owner?: Owner,
    chunkBytes = CHUNK_BYTES,
    private readonly sliceBytes = Infinity,
    checksums = false,
  ) {
    // No read-ahead: a stalled client pins the one piece it has not taken (issue 36, item 9).
    super({ highWaterMark: 0 });
    this.ring = new BufferRing(chunkBytes + BLOCK);
    this.pieces = tarPieces(root, (size) => this.ring.take(size, this.dest ? this.readableLength + this.dest.writableLength : Infinity), owner, chunkBytes, checksums ? new FileChecksums() : undefined);
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    const dest = destination as unknown as Writable;
    if (letsGoOfBytes(dest)) this.dest = dest;
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
