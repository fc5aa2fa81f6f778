import { createSession, type Session } from 'better-sse';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { fstatSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { StringDecoder } from 'node:string_decoder';
import type { StreamName } from '../holder/protocol.js';
import type { KeptLog } from './kept-log.js';
import type { ExitInfo } from './schemas.js';
import type { LendableSocket, OutputSubscriber, TrackedProcess } from './tracked-process.js';

/** The inode of fd `fd` (a socket's, in sockfs), or undefined if the fd is no longer open. */
function inodeOf(fd: number): number | undefined {
  try {
    return fstatSync(fd).ino;
  } catch {
    return undefined;
  }
}

/** A comment line goes out this often, so proxies do not close a quiet stream. */
export const KEEP_ALIVE_MS = 15_000;
/** What a keep-alive is (better-sse's empty comment; the holder writes the same on a lent socket). */
const KEEP_ALIVE_COMMENT = ':\n\n';

/** What goes around a holder's TEXT (already the inside of a JSON string) to make an output event. */
const TEXT_PREFIX = {
  stdout: Buffer.from('event: stdout\ndata: {"stream":"stdout","data":"'),
  stderr: Buffer.from('event: stderr\ndata: {"stream":"stderr","data":"'),
};
const TEXT_SUFFIX = Buffer.from('"}\n\n');

/** Room for the largest TEXT event: a holder's TEXT (64 KiB at most) and what goes around it. */
const EVENT_BUFFER_BYTES = 64 * 1024 + 128;
/** How many written event buffers are kept for reuse, over all streams (1 MiB). */
const KEPT_EVENT_BUFFERS = 16;

/**
 * Buffers for TEXT events, reused once the socket has written them. A fresh
 * 64 KiB buffer per event cost more than the event itself: each was an mmap
 * (glibc serves blocks of 32 KiB and more that way here), a munmap with a TLB
 * shootdown on every CPU running one of envd's threads, and external memory
 * that V8 ran concurrent major GCs to reclaim; under a stream of output,
 * envd's GC threads used as much CPU as its main thread (perf).
 */
const eventBuffers: Buffer[] = [];

function takeEventBuffer(): Buffer {
  return eventBuffers.pop() ?? Buffer.allocUnsafeSlow(EVENT_BUFFER_BYTES);
}

function giveEventBuffer(buffer: Buffer): void {
  if (eventBuffers.length < KEPT_EVENT_BUFFERS) eventBuffers.push(buffer);
}

/**
 * Streams a process to one client as server-sent events: `start`, the output
 * kept so far, live output, then `exit`, after which the response ends.
 *
 * `killOnDisconnect`: the client owns the command (POST /commands/stream),
 * so its going away kills the command; an attacher's does not.
 */
export async function streamProcess(
  request: FastifyRequest,
  reply: FastifyReply,
  proc: TrackedProcess,
  { killOnDisconnect, lendSocket }: { killOnDisconnect: boolean; lendSocket: boolean },
): Promise<void> {
  const headers = stringHeaders(reply);
  reply.hijack();
  const res = reply.raw;
  let subscriber: SseSubscriber | undefined;
  let closed = false;
  const onClose = () => {
    if (closed) return;
    closed = true;
    if (subscriber) proc.unsubscribe(subscriber);
    if (killOnDisconnect && proc.running) {
      request.log.info({ pid: proc.pid }, 'stream client went away: killing the command');
      proc.kill();
    }
  };
  // Before anything is awaited: a client that leaves while the stream is set up still releases (and kills) the command.
  res.once('close', onClose);
  let session: Session;
  try {
    session = await createSession(request.raw, res, {
      // Ours (SseSubscriber): while the holder writes to the socket, envd must not.
      keepAlive: null,
      // Reconnecting would run the command again (POST) or miss output: no retry hint.
      retry: null,
      headers,
    });
  } catch (error) {
    // Nothing was sent yet, but the reply is hijacked: end the connection, which runs onClose.
    request.log.warn({ err: error, pid: proc.pid }, 'could not start the event stream');
    res.destroy();
    return;
  }
  if (closed || res.destroyed) return onClose();
  subscriber = new SseSubscriber(session, res, proc, request.log, lendSocket);
  subscriber.write('start', { pid: proc.pid });
  proc.subscribe(subscriber);
}

/**
 * One SSE client of a command. Output arrives as bytes (from the kept log,
 * then live from the holder) and is decoded here, one streaming UTF-8
 * decoder per stream, so a character split between two reads stays whole.
 * What it holds is at most one read of the log or one message of the holder
 * beyond the socket's own buffer.
 */
class SseSubscriber implements OutputSubscriber {
  private readonly decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  /** Per stream: the holder decodes from here on (its first TEXT has arrived), not `decoders`. */
  private readonly decodedByHolder = { stdout: false, stderr: false };
  private wakeReplay: (() => void) | undefined;
  /** The holder writes to the socket (lend()): nothing may be written here until reclaim(). */
  private lent = false;
  /** Writes not yet handed to the socket, and who waits for them to be (lend()). */
  private unflushed = 0;
  private onFlushed: (() => void) | undefined;
  private readonly keepAlive: NodeJS.Timeout;

  constructor(
    private readonly session: Session,
    private readonly res: ServerResponse,
    private readonly proc: TrackedProcess,
    private readonly log: FastifyRequest['log'],
    private readonly mayLend: boolean,
  ) {
    res.on('drain', () => {
      this.wakeReplay?.();
      if (!this.backedUp) this.proc.subscriberDrained();
    });
    res.once('close', () => {
      clearInterval(this.keepAlive);
      this.wakeReplay?.();
    });
    this.keepAlive = setInterval(() => {
      if (this.lent) this.proc.keepLentSocketAlive();
      else this.send(KEEP_ALIVE_COMMENT);
    }, KEEP_ALIVE_MS);
  }

  get backedUp(): boolean {
    return this.res.writableNeedDrain;
  }

  catchUp(log: KeptLog, end: () => number): void {
    void this.replay(log, end);
  }

  push(stream: StreamName, bytes: Buffer): void {
    const text = this.decoders[stream].write(bytes);
    if (text !== '') this.writeOutput(stream, text);
  }

  lendableSocket(): LendableSocket | undefined {
    const socket = this.res.socket;
    // Plain TCP or a unix socket only: on TLS the bytes on the fd are not the stream's.
    // Both are Node internals (the handle's fd, how the response frames its body): without them, no lending.
    const fd = (socket as unknown as { _handle?: { fd?: unknown } } | null)?._handle?.fd;
    const chunked = (this.res as unknown as { chunkedEncoding?: unknown }).chunkedEncoding;
    if (!this.mayLend || !socket || this.res.destroyed || 'encrypted' in socket || typeof fd !== 'number' || fd < 0 || typeof chunked !== 'boolean') return undefined;
    // The holder checks the inode: by the time it takes the fd, the number may belong to another connection.
    const inode = inodeOf(fd);
    return inode === undefined ? undefined : { fd, inode, chunked };
  }

  lend(flushed: () => void): void {
    this.handDecodingToHolder('stdout');
    this.handDecodingToHolder('stderr');
    this.lent = true;
    if (this.unflushed === 0) flushed();
    else this.onFlushed = flushed;
  }

  reclaim(intact: boolean): void {
    this.lent = false;
    this.onFlushed = undefined;
    // Cut inside an event or chunk: ending the connection is all that is left to say.
    if (!intact) this.res.destroy();
  }

  pushText(stream: StreamName, json: Buffer): void {
    this.handDecodingToHolder(stream);
    if (json.length === 0) return;
    // One event, one write; `json` points into the link's read buffer and is copied here.
    const prefix = TEXT_PREFIX[stream];
    const length = prefix.length + json.length + TEXT_SUFFIX.length;
    const event = length <= EVENT_BUFFER_BYTES ? takeEventBuffer() : Buffer.allocUnsafe(length);
    prefix.copy(event, 0);
    json.copy(event, prefix.length);
    TEXT_SUFFIX.copy(event, prefix.length + json.length);
    // Back to the pool once written (or failed): only then has the socket let go of it.
    this.send(event.subarray(0, length), () => {
      if (event.length === EVENT_BUFFER_BYTES) giveEventBuffer(event);
    });
  }

  /** A character the replay left incomplete is the holder's to finish (or replace) from now on: our part of it goes. */
  private handDecodingToHolder(stream: StreamName): void {
    if (this.decodedByHolder[stream]) return;
    this.decodedByHolder[stream] = true;
    this.decoders[stream] = new StringDecoder('utf8');
  }

  abort(): void {
    clearInterval(this.keepAlive);
    this.res.destroy();
  }

  finish(exit: ExitInfo): void {
    clearInterval(this.keepAlive);
    if (!this.session.isConnected) return;
    for (const stream of ['stdout', 'stderr'] as const) {
      const rest = this.decoders[stream].end();
      if (rest !== '') this.writeOutput(stream, rest);
    }
    this.write('exit', exit);
    this.res.end();
  }

  write(event: string, data: unknown): void {
    // Exactly `event:` and one JSON `data:` line (no id). Written directly:
    // event names are constants and JSON text never holds a raw newline.
    this.send(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  private writeOutput(stream: StreamName, text: string): void {
    this.send(`event: ${stream}\ndata: {"stream":"${stream}","data":${JSON.stringify(text)}}\n\n`);
  }

  /** Every write to the socket: counted until the socket has it, so lend() knows when all is out. */
  private send(chunk: string | Buffer, written?: () => void): void {
    if (this.lent) {
      // Cannot happen by design (the holder gives the socket back before EXIT); a cut stream beats a corrupt one.
      this.log.error({ pid: this.proc.pid }, 'envd wrote to a stream socket lent to the holder: ending the stream');
      this.res.destroy();
      return;
    }
    this.unflushed++;
    this.res.write(chunk, () => {
      written?.();
      if (--this.unflushed === 0 && this.onFlushed) {
        const flushed = this.onFlushed;
        this.onFlushed = undefined;
        flushed();
      }
    });
  }

  /** Replays the log one read at a time, waiting for the socket to drain between reads. */
  private async replay(log: KeptLog, end: () => number): Promise<void> {
    try {
      for await (const frame of log.frames(end)) {
        if (!this.session.isConnected) return;
        this.push(frame.stream, frame.bytes);
        if (this.res.writableNeedDrain) await new Promise<void>((resolve) => (this.wakeReplay = resolve));
        this.wakeReplay = undefined;
      }
    } catch (error) {
      // The headers are out: a failure now can only cut the stream short.
      this.log.warn({ err: error, pid: this.proc.pid }, 'replaying kept output failed: ending the stream');
      this.res.destroy();
      return;
    }
    if (this.session.isConnected) this.proc.caughtUp(this);
  }
}

function stringHeaders(reply: FastifyReply): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) headers[name] = String(value);
  return headers;
}
