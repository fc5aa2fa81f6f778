import { applyExtended, BLOCK, decodeHeader, isZeroBlock, padding, parsePax, TarFormatError, type TarHeader } from './format.js';

/** What readTar hands each entry to, in archive order; each call is awaited before the next. */
export interface TarVisitor {
  /** An entry's header; its data follows through `data`, then `end`. A promise is awaited; most steps need none. */
  entry(header: TarHeader): void | Promise<void>;
  /** The next piece of the entry's data (a view into the input: copy what must outlive the call). */
  data(piece: Buffer): void | Promise<void>;
  end(): void | Promise<void>;
  /** A pax global header's records ('g'); without this method they are read past, never held. */
  global?(records: Map<string, string>): void;
  /** The end-of-archive block was read. */
  finish?(): void;
}

/**
 * The extended headers (pax, GNU long names) that come before one entry are
 * held whole until that entry: together at most this many bytes, beyond that
 * the archive is refused, not buffered. Counted over all of them, not each:
 * 300 pax headers of distinct keys, 310 KB gzipped, held 300 MiB when each
 * was bounded alone. Global headers ('g') are read past, never held.
 */
export const MAX_EXTENDED_BYTES = 1024 * 1024;

/**
 * Reads a tar stream to its end-of-archive block and then the input to its
 * end (whatever follows the archive is ignored, as GNU tar does). Pieces are
 * views into the input chunks, so memory holds one input chunk and one header.
 * A malformed or truncated archive (no end-of-archive block) is a TarFormatError.
 */
export async function readTar(input: AsyncIterable<Buffer>, visitor: TarVisitor): Promise<void> {
  const reader = new ChunkReader(input[Symbol.asyncIterator]());
  let pax: Map<string, string> | undefined;
  let longName: string | undefined;
  let longLink: string | undefined;
  /** Bytes of extended headers held for the coming entry. */
  let held = 0;
  // Every step takes the synchronous path while the input chunk at hand holds what it needs:
  // no promise per header, piece or entry for the many small entries of a source tree.
  for (;;) {
    const block = reader.takeNow(BLOCK) ?? (await reader.exactly(BLOCK, 'a header'));
    if (isZeroBlock(block)) break;
    const raw = decodeHeader(block);
    if (raw.flag === 'x' || raw.flag === 'g' || raw.flag === 'L' || raw.flag === 'K') {
      // A global pax header ('g', git archive's commit id) sets nothing envd keeps: read past it,
      // unless the visitor reads them (envd's own per-file checksums, checksums.ts).
      if (raw.flag === 'g' && !visitor.global) {
        await reader.skip(raw.size + padding(raw.size));
        continue;
      }
      held += raw.size;
      if (held > MAX_EXTENDED_BYTES) throw new TarFormatError(`extended headers of ${held} bytes before one entry (at most ${MAX_EXTENDED_BYTES})`);
      const bytes = await reader.exactly(raw.size, 'an extended header');
      await reader.skip(padding(raw.size));
      if (raw.flag === 'g') {
        visitor.global!(parsePax(bytes));
        held -= raw.size;
      } else if (raw.flag === 'x') {
        pax ??= new Map();
        for (const [key, value] of parsePax(bytes)) pax.set(key, value);
      }
      else if (raw.flag === 'L') longName = cString(bytes);
      else if (raw.flag === 'K') longLink = cString(bytes);
      continue;
    }
    const header = applyExtended(raw, pax, longName, longLink);
    pax = longName = longLink = undefined;
    held = 0;
    // A directory's size is never data (tar-stream and GNU tar agree); any other entry's is, read or not.
    const dataBytes = header.type === 'directory' ? 0 : header.size;
    const started = visitor.entry(header);
    if (started) await started;
    for (let left = dataBytes; left > 0; ) {
      const piece = reader.someNow(left) ?? (await reader.some(left));
      if (!piece) throw new TarFormatError(`unexpected end of the archive in the data of ${JSON.stringify(header.name)}`);
      left -= piece.length;
      const taken = visitor.data(piece);
      if (taken) await taken;
    }
    const ended = visitor.end();
    if (ended) await ended;
    if (!reader.skipNow(padding(dataBytes))) await reader.skip(padding(dataBytes));
  }
  visitor.finish?.();
  await reader.drain();
}

function cString(bytes: Buffer): string {
  const end = bytes.indexOf(0);
  return bytes.toString('utf8', 0, end === -1 ? bytes.length : end);
}

/** Pulls input chunks on demand and hands out exact or partial pieces of them. */
class ChunkReader {
  private chunk: Buffer = Buffer.alloc(0);
  private at = 0;

  constructor(private readonly chunks: AsyncIterator<Buffer>) {}

  /** Exactly `length` bytes if the chunk at hand holds them (a view), else undefined. */
  takeNow(length: number): Buffer | undefined {
    if (this.chunk.length - this.at < length) return undefined;
    const piece = this.chunk.subarray(this.at, this.at + length);
    this.at += length;
    return piece;
  }

  /** Up to `max` bytes of the chunk at hand, undefined if it is used up. */
  someNow(max: number): Buffer | undefined {
    return this.at < this.chunk.length ? this.takeNow(Math.min(max, this.chunk.length - this.at)) : undefined;
  }

  /** Skips `length` bytes if the chunk at hand holds them. */
  skipNow(length: number): boolean {
    if (this.chunk.length - this.at < length) return false;
    this.at += length;
    return true;
  }

  /** Up to `max` bytes (at least one), undefined at the end of the input. */
  async some(max: number): Promise<Buffer | undefined> {
    while (this.at === this.chunk.length) {
      const next = await this.chunks.next();
      if (next.done) return undefined;
      this.chunk = next.value;
      this.at = 0;
    }
    const piece = this.chunk.subarray(this.at, this.at + max);
    this.at += piece.length;
    return piece;
  }

  /** Exactly `length` bytes (copied together when they span chunks). */
  async exactly(length: number, what: string): Promise<Buffer> {
    const first = await this.some(length);
    if (first?.length === length) return first;
    if (!first) throw new TarFormatError(`unexpected end of the archive: no end-of-archive block (truncated?) before ${what}`);
    const whole = Buffer.allocUnsafe(length);
    first.copy(whole);
    for (let filled = first.length; filled < length; ) {
      const piece = await this.some(length - filled);
      if (!piece) throw new TarFormatError(`unexpected end of the archive in ${what}`);
      piece.copy(whole, filled);
      filled += piece.length;
    }
    return whole;
  }

  async skip(length: number): Promise<void> {
    for (let left = length; left > 0; ) {
      const piece = await this.some(left);
      if (!piece) throw new TarFormatError('unexpected end of the archive in padding');
      left -= piece.length;
    }
  }

  async drain(): Promise<void> {
    while (await this.some(Number.MAX_SAFE_INTEGER));
  }
}
