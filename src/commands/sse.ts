import { createSession, type Session } from 'better-sse';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import type { OutputEvent } from './output-log.js';
import type { ExitInfo } from './schemas.js';
import type { OutputSubscriber, TrackedProcess } from './tracked-process.js';

/** A comment line goes out this often, so proxies do not close a quiet stream. */
export const KEEP_ALIVE_MS = 15_000;

/** Below this many written entries the queue is not worth compacting. */
const COMPACT_AFTER = 1024;

/** Queued output of one stream is sent as one event up to about this many characters. */
const COALESCE_CHARS = 1024 * 1024;

type QueueItem = OutputEvent | { exit: ExitInfo };

/**
 * Streams a process to one client as server-sent events: `start`, the output
 * kept so far, live output, then `exit`, after which the response ends.
 *
 * `killOnDisconnect`: the client owns the command (POST /commands/stream),
 * so its going away kills the command; an attacher's does not.
 */
export async function streamProcess(request: FastifyRequest, reply: FastifyReply, proc: TrackedProcess, { killOnDisconnect }: { killOnDisconnect: boolean }): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  const session = await createSession(request.raw, res, {
    keepAlive: KEEP_ALIVE_MS,
    // Reconnecting would run the command again (POST) or miss output: no retry hint.
    retry: null,
    headers: stringHeaders(reply),
  });
  const subscriber = new SseSubscriber(session, res, proc);
  let closed = false;
  const onClose = () => {
    if (closed) return;
    closed = true;
    proc.unsubscribe(subscriber);
    if (killOnDisconnect && proc.running) {
      request.log.info({ pid: proc.pid }, 'stream client went away: killing the command');
      proc.kill();
    }
  };
  session.once('disconnected', onClose);
  // The client may have left before the session connected.
  if (res.destroyed || !session.isConnected) return onClose();
  subscriber.write('start', { pid: proc.pid });
  proc.subscribe(subscriber);
}

class SseSubscriber implements OutputSubscriber {
  private queue: QueueItem[] = [];
  private head = 0;

  constructor(
    private readonly session: Session,
    private readonly res: ServerResponse,
    private readonly proc: TrackedProcess,
  ) {
    // emit() and subscribe() re-check the flow after pushing; the socket
    // draining is the one transition they cannot see.
    res.on('drain', () => {
      this.pump();
      if (!this.backedUp) this.proc.subscriberDrained();
    });
  }

  get backedUp(): boolean {
    return this.head < this.queue.length || this.res.writableNeedDrain;
  }

  replay(events: readonly OutputEvent[]): void {
    this.queue = events.slice();
    this.head = 0;
    this.pump();
  }

  push(event: OutputEvent): void {
    this.queue.push(event);
    this.pump();
  }

  finish(exit: ExitInfo): void {
    this.queue.push({ exit });
    this.pump();
  }

  write(event: string, data: unknown): void {
    // Exactly `event:` and one JSON `data:` line (no id). Written directly
    // rather than through better-sse's EventBuffer: event names are constants
    // here and JSON text never holds a raw newline, so its two sanitising
    // regex passes over every output chunk are pure cost (stream bench).
    this.res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** Writes queued events until the socket pushes back; `drain` calls it again. */
  private pump(): void {
    while (this.head < this.queue.length && !this.res.writableNeedDrain && this.session.isConnected) {
      const item = this.queue[this.head++]!;
      if ('exit' in item) {
        this.write('exit', item.exit);
        this.res.end();
        break;
      }
      // A reader that fell behind gets what piled up as few, larger events.
      let data = item.data;
      while (this.head < this.queue.length && data.length < COALESCE_CHARS) {
        const next = this.queue[this.head]!;
        if ('exit' in next || next.stream !== item.stream) break;
        data += next.data;
        this.head++;
      }
      this.write(item.stream, data === item.data ? item : { stream: item.stream, data });
    }
    if (this.head >= COMPACT_AFTER && this.head * 2 >= this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
  }
}

function stringHeaders(reply: FastifyReply): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) headers[name] = String(value);
  return headers;
}
