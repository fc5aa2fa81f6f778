/**
 * A few large buffers a streamed body reads into and reuses once the kernel
 * has taken their bytes. A fresh 1 MiB buffer per chunk is freed only at
 * V8's pace (a major collection once some 64 MiB of them piled up), and a
 * 200 MiB download grew RSS by 40-76 MiB that way.
 *
 * When a buffer is free is counted, not guessed: every byte pushed is
 * numbered, and `held` (what the body and the stream it is piped into still
 * hold: their readableLength + writableLength) says how many of the last
 * pushed bytes have not left yet. A buffer whose last byte is older than
 * that is free.
 */
export class BufferRing {
  private pushedBytes = 0;
  private readonly slots: { buffer: Buffer; end: number }[] = [];

  constructor(
    private readonly bufferBytes: number,
    private readonly count = 4,
  ) {}

  /** `size` bytes (at most bufferBytes) of a ring buffer whose bytes all left, else of a new one (kept while the ring is small). */
  take(size: number, held: number): Buffer {
    const gone = this.pushedBytes - held;
    const free = this.slots.find((slot) => slot.end <= gone);
    if (free) {
      free.end = Infinity;
      return free.buffer.subarray(0, size);
    }
    const buffer = Buffer.allocUnsafeSlow(this.bufferBytes);
    if (this.slots.length < this.count) this.slots.push({ buffer, end: Infinity });
    return buffer.subarray(0, size);
  }

  /** Numbers the bytes of a chunk about to be pushed; a ring buffer's slot ends with them. */
  pushed(chunk: Buffer): void {
    this.pushedBytes += chunk.length;
    const slot = this.slots.find((s) => s.buffer.buffer === chunk.buffer);
    if (slot) slot.end = this.pushedBytes;
  }
}
