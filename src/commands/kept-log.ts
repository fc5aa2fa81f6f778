import { readFileSync } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { FrameDecoder, type StreamName, type StreamOffsets } from '../holder/protocol.js';

/** Bytes read from a segment at a time: what one reader of kept output holds at most. */
export const LOG_READ_BYTES = 256 * 1024;

export interface Frame {
  stream: StreamName;
  bytes: Buffer;
}

/** What the holder's offsets file says (protocol 4): bytes each stream was written, and bytes of it kept. */
export interface OutputOffsets {
  written: StreamOffsets;
  kept: StreamOffsets;
}

const OFFSETS_BYTES = 32;

/**
 * A command's kept output as its holder wrote it: segment files (the memory
 * tier in the command's state directory, then the spool on disk) listed in
 * order in `segments`, each a run of frames. The log offset counts the bytes
 * of all segments together; the holder reports how far it has written.
 */
/** A small file of the record (in tmpfs), read at once; empty when it cannot be read, as before it exists. */
function readOrEmpty(path: string): Buffer {
  try {
    return readFileSync(path);
  } catch {
    return Buffer.alloc(0);
  }
}

export class KeptLog {
  constructor(readonly dir: string) {}

  async segmentPaths(): Promise<string[]> {
    return readOrEmpty(join(this.dir, 'segments')).toString('utf8').split('\n').filter(Boolean);
  }

  /** Bytes written so far in all segments (for a finished command: the whole log). */
  async size(): Promise<number> {
    let total = 0;
    for (const path of await this.segmentPaths()) total += (await stat(path).catch(() => ({ size: 0 }))).size;
    return total;
  }

  /**
   * The holder's offsets file: undefined for a holder older than protocol 4,
   * which keeps none. A finished command's is final.
   */
  async offsets(): Promise<OutputOffsets | undefined> {
    const bytes = readOrEmpty(join(this.dir, 'offsets'));
    if (bytes.length < OFFSETS_BYTES) return undefined;
    const at = (i: number) => Number(bytes.readBigUInt64LE(i * 8));
    return { written: { stdout: at(0), stderr: at(1) }, kept: { stdout: at(2), stderr: at(3) } };
  }

  /**
   * The frames of the log up to `end()`, from the start or, with `from`,
   * without the first `from.stdout` bytes of stdout and `from.stderr` of
   * stderr (a frame partly before the position comes cut). Kept output is a
   * prefix of each stream, so a position is found by counting.
   */
  async *framesFrom(end: () => number, from: StreamOffsets): AsyncGenerator<Frame> {
    const skip = { ...from };
    for await (const frame of this.frames(end)) {
      const skipped = Math.min(skip[frame.stream], frame.bytes.length);
      skip[frame.stream] -= skipped;
      if (skipped < frame.bytes.length) yield { stream: frame.stream, bytes: frame.bytes.subarray(skipped) };
    }
  }

  /** One stream's kept bytes from `from` (a byte offset of that stream) to `to`, in pieces of at most a frame. */
  async *streamBytes(stream: StreamName, from: number, to: number): AsyncGenerator<Buffer> {
    let at = 0;
    for await (const frame of this.frames(() => Number.MAX_SAFE_INTEGER)) {
      if (frame.stream !== stream) continue;
      const start = Math.max(from - at, 0);
      const stop = Math.min(to - at, frame.bytes.length);
      at += frame.bytes.length;
      if (start < stop) yield frame.bytes.subarray(start, stop);
      if (at >= to) return;
    }
  }

  /**
   * The frames from the start of the log up to `end()` (asked again as the
   * reading goes, so a target that moves on is followed), reading at most
   * LOG_READ_BYTES at a time. Stops early if a segment is missing (removed
   * while read: the command was forgotten).
   */
  async *frames(end: () => number): AsyncGenerator<Frame> {
    if (end() <= 0) return; // nothing kept (a command that printed nothing): no file to read
    const decoder = new FrameDecoder();
    let position = 0;
    let paths = await this.segmentPaths();
    for (let index = 0; position < end(); index++) {
      if (index >= paths.length) paths = await this.segmentPaths();
      const path = paths[index];
      if (path === undefined) return;
      const handle = await open(path, 'r').catch(() => undefined);
      if (!handle) return;
      try {
        for (let offset = 0; position < end(); ) {
          const buffer = Buffer.allocUnsafe(Math.min(LOG_READ_BYTES, end() - position));
          const { bytesRead } = await handle.read(buffer, 0, buffer.length, offset);
          if (bytesRead === 0) break;
          offset += bytesRead;
          position += bytesRead;
          decoder.push(buffer.subarray(0, bytesRead));
          for (let frame = decoder.next(); frame; frame = decoder.next()) yield frame;
        }
      } finally {
        await handle.close();
      }
    }
  }
}
