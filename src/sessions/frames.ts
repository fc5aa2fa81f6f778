import type { StreamName } from '../holder/protocol.js';

/** The record separator that opens and closes every marker (docs/api.md, "Sessions: the protocol"). */
const RS = 0x1e;

/** How a command's frame closed on stdout: its status, and whether it ended the shell (`exit N`, `set -e`). */
export interface FrameEnd {
  status: number;
  exited: boolean;
}

type Phase = 'before' | 'inside' | 'after';

/**
 * Cuts one session command's output out of the shell's two streams: what lies
 * between its begin and end markers (driver.ts), byte for byte. Everything
 * before the begin marker (a background job's output, the shell's own) and
 * after the end marker is dropped. A marker split across two reads is held
 * back (at most one marker's length) until it is whole or ruled out.
 */
export class CommandFrames {
  private readonly begin: Buffer;
  /** What every end marker starts with; stdout's goes on with `e:STATUS` or `x:STATUS`, stderr's with `e`. */
  private readonly endPrefix: Buffer;
  private readonly phase: Record<StreamName, Phase> = { stdout: 'before', stderr: 'before' };
  private readonly pending: Record<StreamName, Buffer> = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
  private frameEnd: FrameEnd | undefined;

  constructor(nonce: string) {
    this.begin = Buffer.from(`\x1eenvd:${nonce}:b\x1e`, 'latin1');
    this.endPrefix = Buffer.from(`\x1eenvd:${nonce}:`, 'latin1');
  }

  /** Both frames have closed: the command has ended and all its output has been handed on. */
  get complete(): boolean {
    return this.phase.stdout === 'after' && this.phase.stderr === 'after';
  }

  /** The status stdout's end marker carried; undefined until it has arrived. */
  get end(): FrameEnd | undefined {
    return this.frameEnd;
  }

  /** Feeds bytes the shell wrote to `stream`; `emit` gets the command's own output among them, in order. */
  feed(stream: StreamName, bytes: Buffer, emit: (stream: StreamName, bytes: Buffer) => void): void {
    if (this.phase[stream] === 'after') return;
    let data = this.pending[stream].length > 0 ? Buffer.concat([this.pending[stream], bytes]) : bytes;
    if (this.phase[stream] === 'before') {
      const at = data.indexOf(this.begin);
      if (at < 0) {
        this.pending[stream] = Buffer.from(data.subarray(Math.max(0, data.length - this.begin.length + 1)));
        return;
      }
      this.phase[stream] = 'inside';
      data = data.subarray(at + this.begin.length);
    }
    this.pending[stream] = Buffer.alloc(0);
    for (let from = 0; ; ) {
      const at = data.indexOf(this.endPrefix, from);
      if (at < 0) {
        // Output goes on now up to a tail that could be the start of a marker split by the read; only that
        // tail waits for the next read (so a line without RS reaches a stream client at once).
        const keep = partialMarkerAt(data, this.endPrefix);
        if (keep > 0) emit(stream, data.subarray(0, keep));
        this.pending[stream] = Buffer.from(data.subarray(keep));
        return;
      }
      const tail = this.readEnd(stream, data.subarray(at + this.endPrefix.length));
      if (tail === 'incomplete') {
        if (at > 0) emit(stream, data.subarray(0, at));
        this.pending[stream] = Buffer.from(data.subarray(at));
        return;
      }
      if (tail === 'not-an-end') {
        // Only the nonce's owner writes this prefix; a malformed rest is output (it cannot be anything else).
        from = at + 1;
        continue;
      }
      if (at > 0) emit(stream, data.subarray(0, at));
      this.phase[stream] = 'after';
      return;
    }
  }

  /** The shell ended without closing a frame: what was held back as a possible marker is output after all. */
  flush(emit: (stream: StreamName, bytes: Buffer) => void): void {
    for (const stream of ['stdout', 'stderr'] as const) {
      if (this.phase[stream] === 'inside' && this.pending[stream].length > 0) emit(stream, this.pending[stream]);
      this.pending[stream] = Buffer.alloc(0);
    }
  }

  /** The rest of an end marker after its prefix: `e` RS on stderr, `e:N` RS or `x:N` RS on stdout. */
  private readEnd(stream: StreamName, rest: Buffer): 'incomplete' | 'not-an-end' | 'end' {
    const close = rest.indexOf(RS);
    if (close < 0) return rest.length > 16 ? 'not-an-end' : 'incomplete';
    const body = rest.subarray(0, close).toString('latin1');
    if (stream === 'stderr') return body === 'e' ? 'end' : 'not-an-end';
    const match = /^([ex]):(\d{1,3})$/.exec(body);
    if (!match) return 'not-an-end';
    this.frameEnd = { status: Number(match[2]), exited: match[1] === 'x' };
    return 'end';
  }
}

/**
 * Where the tail of `data` that is a proper beginning of `marker` starts
 * (only such a tail can be a marker split across two reads); data.length
 * when there is none. The earliest candidate wins: it holds back the most.
 */
function partialMarkerAt(data: Buffer, marker: Buffer): number {
  for (let at = data.indexOf(marker[0]!, Math.max(0, data.length - marker.length + 1)); at >= 0; at = data.indexOf(marker[0]!, at + 1)) {
    if (marker.subarray(0, data.length - at).equals(data.subarray(at))) return at;
  }
  return data.length;
}
