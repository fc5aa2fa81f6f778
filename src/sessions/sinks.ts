import { createSession } from 'better-sse';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { StringDecoder } from 'node:string_decoder';
import type { StreamName } from '../holder/protocol.js';
import type { MemoryBudget, Reservation } from '../memory-budget.js';
import { KEEP_ALIVE_MS } from '../commands/sse.js';
import type { Static } from '@sinclair/typebox';
import type { SessionCommandResult } from './schemas.js';
import type { CommandSink, Session, SessionExit } from './session.js';

/**
 * The most of each stream a session command's JSON result holds (envd builds
 * it in memory); past it the newest output is dropped and `*_truncated` set.
 * The stream route has no such cap: it holds one event at a time.
 */
export const MAX_RESULT_BYTES_PER_STREAM = 16 * 1024 * 1024;
/** What the result takes from the memory budget's `transfers` part at a time, as it grows. */
export const RESULT_STEP_BYTES = 256 * 1024;

/**
 * Collects a command's output for its JSON result, up to the cap per stream,
 * and only as far as the memory budget's `transfers` part has room (taken
 * in steps as the output grows): past either, that stream's newest output
 * is dropped and `*_truncated` set. release() gives the budget back.
 */
export class ResultSink implements CommandSink {
  private readonly chunks: Record<StreamName, Buffer[]> = { stdout: [], stderr: [] };
  private readonly size = { stdout: 0, stderr: 0 };
  private readonly truncated = { stdout: false, stderr: false };
  private readonly held: Reservation[] = [];
  private heldBytes = 0;

  constructor(private readonly budget?: MemoryBudget) {}

  output(stream: StreamName, bytes: Buffer): boolean {
    // Once cut, a stream stays cut: output after a gap would read as if nothing were missing.
    if (this.truncated[stream]) return true;
    const room = this.grow(Math.min(bytes.length, MAX_RESULT_BYTES_PER_STREAM - this.size[stream]));
    if (bytes.length > room) this.truncated[stream] = true;
    const kept = bytes.length > room ? bytes.subarray(0, room) : bytes;
    if (kept.length > 0) {
      // A copy: the holder's message buffer is reused.
      this.chunks[stream].push(Buffer.from(kept));
      this.size[stream] += kept.length;
    }
    return true;
  }

  /** Gives back what the result took of the budget (once the answer is built). */
  release(): void {
    for (const reservation of this.held.splice(0)) reservation.release();
    this.heldBytes = 0;
  }

  /** How many of `bytes` more fit in what the budget gives, taking more steps of it as needed. */
  private grow(bytes: number): number {
    if (!this.budget) return bytes;
    const kept = this.size.stdout + this.size.stderr;
    while (this.heldBytes < kept + bytes) {
      const step = this.budget.takeNow('transfers', RESULT_STEP_BYTES);
      if (!step) return Math.max(0, this.heldBytes - kept);
      this.held.push(step);
      this.heldBytes += RESULT_STEP_BYTES;
    }
    return bytes;
  }

  result(exit: SessionExit): Static<typeof SessionCommandResult> {
    const text = (stream: StreamName) => new StringDecoder('utf8').end(Buffer.concat(this.chunks[stream]));
    return {
      stdout: text('stdout'),
      stderr: text('stderr'),
      ...exit,
      ...(this.truncated.stdout ? { stdout_truncated: true } : {}),
      ...(this.truncated.stderr ? { stderr_truncated: true } : {}),
    };
  }
}

/**
 * A command's output as the same server-sent events /commands/stream sends:
 * start {pid}, stdout/stderr {stream, data}, exit. Event by event: a client
 * that does not read holds the shell (the holder stops reading its pipes),
 * never envd's memory.
 */
export class EventSink implements CommandSink {
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly keepAlive: NodeJS.Timeout;

  private constructor(
    private readonly reply: FastifyReply,
    private readonly session: Session,
    private readonly bytes: boolean,
  ) {
    this.keepAlive = setInterval(() => this.send(':\n\n'), KEEP_ALIVE_MS);
    reply.raw.once('close', () => clearInterval(this.keepAlive));
    reply.raw.on('drain', () => session.drained());
  }

  static async open(request: FastifyRequest, reply: FastifyReply, session: Session, bytes: boolean): Promise<EventSink> {
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) headers[name] = String(value);
    reply.hijack();
    await createSession(request.raw, reply.raw, { keepAlive: null, retry: null, headers });
    const sink = new EventSink(reply, session, bytes);
    sink.event('start', { pid: session.pid });
    return sink;
  }

  output(stream: StreamName, bytes: Buffer): boolean {
    const data = this.bytes ? bytes.toString('base64') : this.decoders[stream].write(bytes);
    if (data === '') return true;
    return this.event(stream, { stream, data });
  }

  /** The last events: what a decoder still held, then exit; the response ends. */
  finish(exit: SessionExit): void {
    if (!this.bytes) {
      for (const stream of ['stdout', 'stderr'] as const) {
        const rest = this.decoders[stream].end();
        if (rest !== '') this.event(stream, { stream, data: rest });
      }
    }
    this.event('exit', exit);
    this.reply.raw.end();
  }

  fail(message: string): void {
    this.event('error', { message });
    this.reply.raw.end();
  }

  private event(name: string, data: unknown): boolean {
    return this.send(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  private send(text: string): boolean {
    const res = this.reply.raw;
    if (res.destroyed || res.writableEnded) return true;
    return res.write(text);
  }
}
