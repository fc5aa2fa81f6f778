/**
 * One stream's output decoded as UTF-8 a chunk at a time, knowing at every
 * point how many bytes its text stands for. Node's StringDecoder gives the
 * same text but not that count: what it holds of an incomplete character is
 * its own business. Here a chunk's bytes are decoded up to the start of a
 * character that is still incomplete, which waits for the next chunk: the
 * WHATWG decoder's state there is empty, so the text is the same as one
 * decoder over the whole stream gives (one U+FFFD per maximal subpart of an
 * invalid sequence), and an SSE id can name exactly where the text stops
 * (src/holder/json-text.c does the same on the holder's side).
 */
export class Utf8Cursor {
  private static readonly decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  /** Bytes of a character begun but not complete, carried to the next chunk (at most 3). */
  private carried: Buffer = Buffer.alloc(0);
  /** Bytes of the stream whose text has been returned: where a client resuming after it starts. */
  offset: number;

  constructor(offset = 0) {
    this.offset = offset;
  }

  /** Bytes of the stream taken in: `offset` and what is carried. */
  get consumed(): number {
    return this.offset + this.carried.length;
  }

  /** The text of `bytes` (and what was carried) up to an incomplete character at their end. */
  write(bytes: Buffer): string {
    const all = this.carried.length > 0 ? Buffer.concat([this.carried, bytes]) : bytes;
    const keep = incompleteTail(all);
    this.carried = keep > 0 ? Buffer.from(all.subarray(all.length - keep)) : Buffer.alloc(0);
    const complete = all.subarray(0, all.length - keep);
    this.offset += complete.length;
    return complete.length > 0 ? Utf8Cursor.decoder.decode(complete) : '';
  }

  /** The stream ended: a character left incomplete is one U+FFFD. */
  end(): string {
    if (this.carried.length === 0) return '';
    this.offset += this.carried.length;
    this.carried = Buffer.alloc(0);
    return '\ufffd';
  }

  /** Someone else decodes from here (the holder's TEXT, which completes the character begun): what was carried goes. */
  dropCarried(): void {
    this.carried = Buffer.alloc(0);
  }
}

/**
 * How many bytes at the end of `bytes` are a character that is begun and
 * valid so far but not complete (0-3): a lead byte and its continuations,
 * each within the bounds the WHATWG decoder checks (E0 A0-BF, ED 80-9F,
 * F0 90-BF, F4 80-8F, else 80-BF).
 */
export function incompleteTail(bytes: Uint8Array): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back++) {
    const lead = bytes[bytes.length - back]!;
    if (lead >= 0x80 && lead <= 0xbf) continue; // a continuation: the lead is further back
    const needed = lead >= 0xc2 && lead <= 0xdf ? 1 : lead >= 0xe0 && lead <= 0xef ? 2 : lead >= 0xf0 && lead <= 0xf4 ? 3 : 0;
    if (needed < back) return 0; // not a lead byte, or its character is complete (or broken) within the bytes
    for (let i = 1; i < back; i++) {
      const byte = bytes[bytes.length - back + i]!;
      const [low, high] = i === 1 ? firstContinuation(lead) : [0x80, 0xbf];
      if (byte < low || byte > high) return 0; // broken: the decoder has replaced it already
    }
    return back;
  }
  return 0;
}

function firstContinuation(lead: number): [number, number] {
  if (lead === 0xe0) return [0xa0, 0xbf];
  if (lead === 0xed) return [0x80, 0x9f];
  if (lead === 0xf0) return [0x90, 0xbf];
  if (lead === 0xf4) return [0x80, 0x8f];
  return [0x80, 0xbf];
}
