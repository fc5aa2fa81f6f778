export type StreamName = 'stdout' | 'stderr';

export interface OutputEvent {
  readonly stream: StreamName;
  readonly data: string;
}

/** Consecutive chunks of one stream are merged up to this size, so tiny writes do not cost an object each. */
const MERGE_LIMIT_CHARS = 64 * 1024;

/**
 * The output a command printed, in order, for `wait` and for replay to a late
 * attacher. Each stream keeps at most `capBytes` of UTF-8; past that the
 * newest output is dropped and the stream is marked truncated.
 *
 * Events are immutable: a merge replaces the last entry with a new object, so
 * a subscriber holding a snapshot of `events` never sees text twice.
 */
export class OutputLog {
  readonly events: OutputEvent[] = [];
  readonly truncated = { stdout: false, stderr: false };
  private readonly keptBytes = { stdout: 0, stderr: 0 };

  constructor(readonly capBytes: number) {}

  append(stream: StreamName, data: string): void {
    if (data === '' || this.truncated[stream]) return;
    const room = this.capBytes - this.keptBytes[stream];
    let bytes = Buffer.byteLength(data, 'utf8');
    if (bytes > room) {
      data = cutToBytes(data, room);
      bytes = Buffer.byteLength(data, 'utf8');
      this.truncated[stream] = true;
      if (data === '') return;
    }
    this.keptBytes[stream] += bytes;
    const last = this.events.at(-1);
    if (last && last.stream === stream && last.data.length + data.length <= MERGE_LIMIT_CHARS) {
      this.events[this.events.length - 1] = { stream, data: last.data + data };
    } else {
      this.events.push({ stream, data });
    }
  }

  text(stream: StreamName): string {
    let text = '';
    for (const event of this.events) if (event.stream === stream) text += event.data;
    return text;
  }
}

/** The longest prefix of `text` whose UTF-8 form fits in `maxBytes`, never splitting a character. */
export function cutToBytes(text: string, maxBytes: number): string {
  if (maxBytes <= 0) return '';
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxBytes) return text;
  let end = maxBytes;
  // 10xxxxxx is a continuation byte: the character at `end` started earlier, so cut before it.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end).toString('utf8');
}
