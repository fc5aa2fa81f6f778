// The live channel between envd and an envd-holder (docs/holder-protocol.md),
// and the frames of the kept-output segments the holder writes.
// Every message is `u8 type | u32 LE payload length | payload`; a frame is
// `u8 stream | u32 LE length | bytes`. Both decoders are incremental and hold at
// most one message's bytes beyond what the caller has not yet taken, so a
// caller that stops calling next() stops their growth too (with its socket paused).

export const PROTOCOL_VERSION = 4;
/** The first version whose holders take LIVE_ON's flags and send TEXT. */
export const TEXT_SINCE_VERSION = 2;
/** The first version whose holders can be lent a stream client's socket (DIRECT_ON). */
export const DIRECT_SINCE_VERSION = 3;
/** The first version whose holders say where each stream's output is (SYNC, TEXT, DATA, DIRECT_ENDED) and keep an offsets file. */
export const OFFSETS_SINCE_VERSION = 4;
export const MAX_MESSAGE_PAYLOAD = 65536; // envd -> holder

export type StreamName = 'stdout' | 'stderr';
export type AckStatus = 0 | 1 | 2 | 3; // ok, no stdin, stdin closed, not a pty
/** Why the holder gave a lent socket back: asked to (or the output is complete), could not take it, or writing failed. */
export type DirectEndReason = 'off' | 'refused' | 'failed';
export interface Truncation {
  stdout: boolean;
  stderr: boolean;
}
/** A position in both of a command's output streams, in bytes of each (what an SSE id says). */
export interface StreamOffsets {
  stdout: number;
  stderr: number;
}
export type HolderMessage =
  | { type: 'hello'; version: number; shellPid: number; reaped: boolean; exitCode: number; signal: number; truncated: Truncation; logEnd: number }
  /** `offsets` (protocol 4): where live output starts in each stream (for TEXT: what the holder's decoders have not taken). */
  | { type: 'sync'; logEnd: number; offsets?: StreamOffsets }
  /** `offset` (protocol 4): the bytes of the stream written up to the end of this chunk. */
  | { type: 'data'; stream: StreamName; logEnd: number; offset?: number; bytes: Buffer }
  /**
   * Output decoded as UTF-8 and escaped as the inside of a JSON string (protocol 2, LIVE_ON with the text flag).
   * `offset` (protocol 4): how far the stream's text has gone out with this piece (a character begun is not in it).
   */
  | { type: 'text'; stream: StreamName; logEnd: number; offset?: number; json: Buffer }
  | { type: 'ack'; id: number; status: AckStatus }
  | { type: 'reaped'; exitCode: number; signal: number }
  | { type: 'exit'; exitCode: number; signal: number; truncated: Truncation; logEnd: number }
  /** The holder has the lent socket and sent all its TEXT before this: envd writes those, then says GO. */
  | { type: 'direct-ready' }
  /** The lent socket is envd's again; all output up to logEnd is on it (`offsets`, protocol 4: each stream's text offset). */
  | { type: 'direct-ended'; logEnd: number; reason: DirectEndReason; offsets?: StreamOffsets };

const HEADER = 5;

const LIVE_ON = 0x01;
const LIVE_OFF = 0x02;
const STDIN = 0x03;
const STDIN_EOF = 0x04;
const RESIZE = 0x05;
const DIRECT_ON = 0x06;
const DIRECT_GO = 0x07;
const DIRECT_OFF = 0x08;
const DIRECT_PING = 0x09;

const HELLO = 0x80;
const SYNC = 0x81;
const DATA = 0x82;
const ACK = 0x83;
const REAPED = 0x84;
const EXIT = 0x85;
const TEXT = 0x86;
const DIRECT_READY = 0x87;
const DIRECT_ENDED = 0x88;
const DIRECT_END_REASONS: readonly DirectEndReason[] = ['off', 'refused', 'failed'];

const LIVE_FLAG_TEXT = 0x01;

/**
 * The holder's messages are small except DATA (one 64 KiB read plus its header);
 * anything longer means the bytes are not a holder's, and the decoder says so
 * instead of buffering without bound.
 */
const MAX_HOLDER_PAYLOAD = 17 + 65536;

/** A frame holds at most one read of the command's output. */
const MAX_FRAME = 65536;

function encode(type: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const message = Buffer.allocUnsafe(HEADER + payload.length);
  message.writeUInt8(type, 0);
  message.writeUInt32LE(payload.length, 1);
  payload.copy(message, HEADER);
  return message;
}

function checkU32(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new RangeError(`${name} must be a u32, got ${value}`);
}

function checkU16(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > 0xffff) throw new RangeError(`${name} must be a u16, got ${value}`);
}

/** `text`: ask for TEXT instead of DATA (holders of protocol 2 and later only; older ones close on a payload). */
export function encodeLiveOn(text = false): Buffer {
  return text ? encode(LIVE_ON, Buffer.of(LIVE_FLAG_TEXT)) : encode(LIVE_ON);
}

export function encodeLiveOff(): Buffer {
  return encode(LIVE_OFF);
}

/** bytes.length <= MAX_MESSAGE_PAYLOAD - 4, else throws: the caller splits larger stdin writes. */
export function encodeStdin(id: number, bytes: Buffer): Buffer {
  checkU32('id', id);
  if (bytes.length > MAX_MESSAGE_PAYLOAD - 4) throw new RangeError(`stdin chunk of ${bytes.length} bytes exceeds ${MAX_MESSAGE_PAYLOAD - 4}`);
  const message = Buffer.allocUnsafe(HEADER + 4 + bytes.length);
  message.writeUInt8(STDIN, 0);
  message.writeUInt32LE(4 + bytes.length, 1);
  message.writeUInt32LE(id, HEADER);
  bytes.copy(message, HEADER + 4);
  return message;
}

export function encodeStdinEof(id: number): Buffer {
  checkU32('id', id);
  const payload = Buffer.allocUnsafe(4);
  payload.writeUInt32LE(id, 0);
  return encode(STDIN_EOF, payload);
}

export function encodeResize(id: number, cols: number, rows: number): Buffer {
  checkU32('id', id);
  checkU16('cols', cols);
  checkU16('rows', rows);
  const payload = Buffer.allocUnsafe(8);
  payload.writeUInt32LE(id, 0);
  payload.writeUInt16LE(cols, 4);
  payload.writeUInt16LE(rows, 6);
  return encode(RESIZE, payload);
}

/**
 * Lends the holder a stream client's socket: fd `fd` of process `pid` (envd), which it duplicates with
 * pidfd_getfd if it is still the socket of inode `inode` (the fd number may have gone to another connection
 * by then); `chunked`: each event goes out as one HTTP chunk.
 */
export function encodeDirectOn(pid: number, fd: number, inode: number, chunked: boolean): Buffer {
  checkU32('pid', pid);
  checkU32('fd', fd);
  if (!Number.isSafeInteger(inode) || inode < 0) throw new RangeError(`inode must be a non-negative safe integer, got ${inode}`);
  const payload = Buffer.allocUnsafe(17);
  payload.writeUInt32LE(pid, 0);
  payload.writeUInt32LE(fd, 4);
  payload.writeBigUInt64LE(BigInt(inode), 8);
  payload[16] = chunked ? 1 : 0;
  return encode(DIRECT_ON, payload);
}

/** After DIRECT_READY, once envd has written everything before it: the holder writes from here on. */
export function encodeDirectGo(): Buffer {
  return encode(DIRECT_GO);
}

/** Asks for the lent socket back (after the event being written); DIRECT_ENDED answers. */
export function encodeDirectOff(): Buffer {
  return encode(DIRECT_OFF);
}

/** A keep-alive comment for the lent socket, written unless an event is under way. */
export function encodeDirectPing(): Buffer {
  return encode(DIRECT_PING);
}

/**
 * Chunks pushed, consumed from the front without copying them into one
 * growing buffer: a record is sliced (or, across chunk borders, concatenated
 * once) only when it is complete.
 */
class ChunkQueue {
  private chunks: Buffer[] = [];
  private total = 0;

  get length(): number {
    return this.total;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const last = this.chunks.at(-1);
    // A chunk that continues the last one in the same memory joins it: a message across both stays a view.
    if (last && last.buffer === chunk.buffer && last.byteOffset + last.length === chunk.byteOffset) {
      this.chunks[this.chunks.length - 1] = Buffer.from(last.buffer, last.byteOffset, last.length + chunk.length);
    } else {
      this.chunks.push(chunk);
    }
    this.total += chunk.length;
  }

  /** The first n bytes without consuming them (n <= length). */
  peek(n: number): Buffer {
    const first = this.chunks[0]!;
    if (first.length >= n) return first.subarray(0, n);
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    for (const chunk of this.chunks) {
      const used = Math.min(chunk.length, n - filled);
      chunk.copy(out, filled, 0, used);
      filled += used;
      if (filled === n) break;
    }
    return out;
  }

  /** Removes and returns the first n bytes (n <= length). */
  take(n: number): Buffer {
    const first = this.chunks[0];
    if (first && first.length >= n) {
      const out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      this.total -= n;
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const chunk = this.chunks[0]!;
      const used = Math.min(chunk.length, n - filled);
      chunk.copy(out, filled, 0, used);
      filled += used;
      if (used === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(used);
    }
    this.total -= n;
    return out;
  }
}

function readU64(buffer: Buffer, offset: number): number {
  return Number(buffer.readBigUInt64LE(offset));
}

function streamName(byte: number, what: string): StreamName {
  if (byte === 1) return 'stdout';
  if (byte === 2) return 'stderr';
  throw new Error(`${what}: unknown stream ${byte}`);
}

function expectLength(name: string, payload: Buffer, length: number): void {
  if (payload.length !== length) throw new Error(`holder message ${name}: payload of ${payload.length} bytes, expected ${length}`);
}

function truncation(payload: Buffer, offset: number): Truncation {
  return { stdout: payload[offset] !== 0, stderr: payload[offset + 1] !== 0 };
}

function offsetsAt(payload: Buffer, at: number): StreamOffsets {
  return { stdout: readU64(payload, at), stderr: readU64(payload, at + 8) };
}

/** One message; `version` is the holder's (from its HELLO): protocol 4 added stream offsets to SYNC, DATA, TEXT and DIRECT_ENDED. */
function decodeMessage(type: number, payload: Buffer, version: number): HolderMessage {
  const offsets = version >= OFFSETS_SINCE_VERSION;
  switch (type) {
    case HELLO:
      expectLength('HELLO', payload, 25);
      return {
        type: 'hello',
        version: payload.readUInt16LE(0),
        shellPid: payload.readUInt32LE(2),
        reaped: payload[6] !== 0,
        exitCode: payload.readInt32LE(7),
        signal: payload.readInt32LE(11),
        truncated: truncation(payload, 15),
        logEnd: readU64(payload, 17),
      };
    case SYNC:
      expectLength('SYNC', payload, offsets ? 24 : 8);
      return offsets ? { type: 'sync', logEnd: readU64(payload, 0), offsets: offsetsAt(payload, 8) } : { type: 'sync', logEnd: readU64(payload, 0) };
    case DATA: {
      const header = offsets ? 17 : 9;
      if (payload.length < header) throw new Error(`holder message DATA: payload of ${payload.length} bytes is shorter than its header`);
      const stream = streamName(payload[0]!, 'holder message DATA');
      return { type: 'data', stream, logEnd: readU64(payload, 1), ...(offsets ? { offset: readU64(payload, 9) } : {}), bytes: payload.subarray(header) };
    }
    case TEXT: {
      const header = offsets ? 17 : 9;
      if (payload.length < header) throw new Error(`holder message TEXT: payload of ${payload.length} bytes is shorter than its header`);
      const stream = streamName(payload[0]!, 'holder message TEXT');
      return { type: 'text', stream, logEnd: readU64(payload, 1), ...(offsets ? { offset: readU64(payload, 9) } : {}), json: payload.subarray(header) };
    }
    case ACK: {
      expectLength('ACK', payload, 5);
      const status = payload[4]!;
      if (status > 3) throw new Error(`holder message ACK: unknown status ${status}`);
      return { type: 'ack', id: payload.readUInt32LE(0), status: status as AckStatus };
    }
    case REAPED:
      expectLength('REAPED', payload, 8);
      return { type: 'reaped', exitCode: payload.readInt32LE(0), signal: payload.readInt32LE(4) };
    case EXIT:
      expectLength('EXIT', payload, 18);
      return { type: 'exit', exitCode: payload.readInt32LE(0), signal: payload.readInt32LE(4), truncated: truncation(payload, 8), logEnd: readU64(payload, 10) };
    case DIRECT_READY:
      expectLength('DIRECT_READY', payload, 0);
      return { type: 'direct-ready' };
    case DIRECT_ENDED: {
      expectLength('DIRECT_ENDED', payload, offsets ? 25 : 9);
      const reason = DIRECT_END_REASONS[payload[8]!];
      if (reason === undefined) throw new Error(`holder message DIRECT_ENDED: unknown reason ${payload[8]}`);
      return { type: 'direct-ended', logEnd: readU64(payload, 0), reason, ...(offsets ? { offsets: offsetsAt(payload, 9) } : {}) };
    }
    default:
      throw new Error(`holder message: unknown type 0x${type.toString(16)}`);
  }
}

/** Incremental decoder: push() socket chunks, next() returns one whole message or undefined (so the caller can stop between messages). */
export class MessageDecoder {
  private readonly queue = new ChunkQueue();
  /** The holder's protocol version, which shapes its messages after HELLO: set from the HELLO (HELLO itself never changed). */
  version = 1;

  push(chunk: Buffer): void {
    this.queue.push(chunk);
  }

  /** Throws on bytes that are not a holder's messages; the caller should then drop the connection. */
  next(): HolderMessage | undefined {
    if (this.queue.length < HEADER) return undefined;
    const header = this.queue.peek(HEADER);
    const type = header[0]!;
    const length = header.readUInt32LE(1);
    if (length > MAX_HOLDER_PAYLOAD) throw new Error(`holder message: payload of ${length} bytes is over ${MAX_HOLDER_PAYLOAD}`);
    if (this.queue.length < HEADER + length) return undefined;
    this.queue.take(HEADER);
    return decodeMessage(type, this.queue.take(length), this.version);
  }

  get buffered(): number {
    return this.queue.length;
  }

  /**
   * Removes what is buffered (a partial message) and returns it as one
   * buffer: a view of the memory pushed when that was one chunk, else a copy.
   * For a caller that moves it to the front of its own read buffer and pushes
   * it again, together with the next read, instead of letting it be copied.
   */
  takeBuffered(): Buffer {
    return this.queue.take(this.queue.length);
  }
}

/** Reads the frames of kept-output segment bytes: used by envd's log reader and by tests. */
export class FrameDecoder {
  private readonly queue = new ChunkQueue();

  push(chunk: Buffer): void {
    this.queue.push(chunk);
  }

  /** Throws on a frame with an unknown stream byte or an impossible length: the bytes are not a segment's. */
  next(): { stream: StreamName; bytes: Buffer } | undefined {
    if (this.queue.length < HEADER) return undefined;
    const header = this.queue.peek(HEADER);
    const stream = streamName(header[0]!, 'segment frame');
    const length = header.readUInt32LE(1);
    if (length > MAX_FRAME) throw new Error(`segment frame: length ${length} is over ${MAX_FRAME}`);
    if (this.queue.length < HEADER + length) return undefined;
    this.queue.take(HEADER);
    return { stream, bytes: this.queue.take(length) };
  }

  get buffered(): number {
    return this.queue.length;
  }
}
