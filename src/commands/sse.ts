import { createSession, type Session } from 'better-sse';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { fstatSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import type { StreamName, StreamOffsets } from '../holder/protocol.js';
import type { KeptLog } from './kept-log.js';
import type { ExitInfo } from './schemas.js';
import type { LendableSocket, OutputSubscriber, ReplayTarget, TrackedProcess } from './tracked-process.js';
import { responseChunked, socketFd } from '../node-internals.js';
import { Utf8Cursor } from './utf8-cursor.js';

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

/** Room for the largest TEXT event: a holder's TEXT (64 KiB at most) and what goes around it (its id included). */
const EVENT_BUFFER_BYTES = 64 * 1024 + 160;
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
  {
    killOnDisconnect,
    lendSocket,
    from = { stdout: 0, stderr: 0 },
    bytes = false,
    onStarted,
  }: {
    killOnDisconnect: boolean;
    lendSocket: boolean;
    from?: StreamOffsets;
    bytes?: boolean;
    /** Hook: gets a writer of extra whole events (the `ready` event, src/commands/readiness.ts) once the stream is under way. */
    onStarted?: (write: (event: string, data: unknown) => void) => void;
  },
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
    // envd ended the stream itself (abort: its client was told to attach again): the command runs on.
    if (killOnDisconnect && proc.running && !subscriber?.aborted) {
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
  // The holder writes TEXT on a lent socket: a bytes client's socket is never lent.
  subscriber = new SseSubscriber(session, res, proc, request.log, lendSocket && !bytes, from, proc.resumable, bytes);
  subscriber.write('start', { pid: proc.pid });
  proc.subscribe(subscriber);
  const own = subscriber;
  onStarted?.((event, data) => {
    if (!res.writableEnded && !res.destroyed) own.write(event, data);
  });
}

/**
 * One SSE client of a command. Output arrives as bytes (from the kept log,
 * then live from the holder) and is decoded here, one UTF-8 cursor per stream,
 * so a character split between two reads stays whole, and every output event
 * carries the SSE id of the position after it (docs/api.md, "Resuming a
 * stream"). What it holds is at most one read of the log or one message of
 * the holder beyond the socket's own buffer.
 */
class SseSubscriber implements OutputSubscriber {
  private readonly cursors: Record<StreamName, Utf8Cursor>;
  /** Per stream: the holder decodes from here on (its first TEXT has arrived), not `cursors`. */
  private readonly decodedByHolder = { stdout: false, stderr: false };
  private wakeReplay: (() => void) | undefined;
  /** The holder writes to the socket (lend()): nothing may be written here until reclaim(). */
  private lent = false;
  /** Writes not yet handed to the socket, and who waits for them to be (lend()). */
  private unflushed = 0;
  private onFlushed: (() => void) | undefined;
  private readonly keepAlive: NodeJS.Timeout;
  /** envd ended this stream before `exit` (abort): its leaving is not the client's. */
  aborted = false;

  constructor(
    private readonly session: Session,
    private readonly res: ServerResponse,
    private readonly proc: TrackedProcess,
    private readonly log: FastifyRequest['log'],
    private readonly mayLend: boolean,
    /** Where this client starts: the start of the output, or the id it resumed from. */
    readonly from: StreamOffsets,
    /** Whether its events carry ids: the command's holder says where each stream is (protocol 4). */
    private readonly ids: boolean,
    /** encoding base64: output events carry each chunk's raw bytes, base64-encoded, not text. */
    readonly wantsBytes = false,
  ) {
    this.cursors = { stdout: new Utf8Cursor(from.stdout), stderr: new Utf8Cursor(from.stderr) };
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

  catchUp(log: KeptLog, target: () => ReplayTarget): void {
    void this.replay(log, target);
  }

  push(stream: StreamName, bytes: Buffer): void {
    if (this.wantsBytes) return this.writeBytes(stream, bytes);
    const text = this.cursors[stream].write(bytes);
    if (text !== '') this.writeOutput(stream, text);
  }

  lendableSocket(): LendableSocket | undefined {
    if (!this.mayLend || this.res.destroyed) return undefined;
    // Both are Node internals (the connection's fd, how the response frames its body), read in
    // node-internals.ts: where they do not behave as assumed, no lending (envd writes the output).
    const fd = socketFd(this.res.socket);
    const chunked = responseChunked(this.res);
    if (fd === undefined || chunked === undefined) return undefined;
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

  reclaim(intact: boolean, offsets?: StreamOffsets): void {
    this.lent = false;
    this.onFlushed = undefined;
    // The holder wrote events (with their ids) meanwhile: the position is where it stopped.
    if (offsets) for (const stream of STREAMS) this.cursors[stream].offset = offsets[stream];
    // Cut inside an event or chunk: ending the connection is all that is left to say.
    if (!intact) this.res.destroy();
  }

  pushText(stream: StreamName, json: Buffer, offset?: number): void {
    if (this.wantsBytes) {
      // Cannot happen by design (a bytes subscriber makes the process ask for DATA); a cut stream beats a wrong one.
      this.log.error({ pid: this.proc.pid }, 'a base64 stream got the holder\'s text: ending the stream');
      this.res.destroy();
      return;
    }
    this.handDecodingToHolder(stream);
    if (offset !== undefined) this.cursors[stream].offset = offset;
    if (json.length === 0) return;
    // One event, one write; `json` points into the link's read buffer and is copied here.
    // The prefix with the id is written into the event's own buffer: no allocation per event.
    const head = this.ids ? `event: ${stream}\nid: ${this.id()}\ndata: {"stream":"${stream}","data":"` : undefined;
    const headLength = head === undefined ? TEXT_PREFIX[stream].length : head.length;
    const length = headLength + json.length + TEXT_SUFFIX.length;
    const event = length <= EVENT_BUFFER_BYTES ? takeEventBuffer() : Buffer.allocUnsafe(length);
    if (head === undefined) TEXT_PREFIX[stream].copy(event, 0);
    else event.write(head, 0, 'latin1');
    json.copy(event, headLength);
    TEXT_SUFFIX.copy(event, headLength + json.length);
    // Back to the pool once written (or failed): only then has the socket let go of it.
    this.send(event.subarray(0, length), () => {
      if (event.length === EVENT_BUFFER_BYTES) giveEventBuffer(event);
    });
  }

  /** A character the replay left incomplete is the holder's to finish (or replace) from now on: our part of it goes. */
  private handDecodingToHolder(stream: StreamName): void {
    if (this.decodedByHolder[stream]) return;
    this.decodedByHolder[stream] = true;
    this.cursors[stream].dropCarried();
  }

  abort(message: string): void {
    this.aborted = true;
    clearInterval(this.keepAlive);
    // On a socket lent to the holder an event may have been cut halfway: ending the connection is all that is left.
    if (this.lent || !this.session.isConnected || this.res.destroyed) {
      this.res.destroy();
      return;
    }
    // Never a silent end: the client learns why its stream stopped before `exit` (docs/api.md).
    this.write('error', { message });
    this.res.end();
  }

  finish(exit: ExitInfo): void {
    clearInterval(this.keepAlive);
    if (!this.session.isConnected) return;
    for (const stream of STREAMS) {
      const rest = this.cursors[stream].end();
      if (rest !== '') this.writeOutput(stream, rest);
    }
    this.write('exit', exit);
    this.res.end();
  }

  write(event: string, data: unknown): void {
    // Exactly `event:` and one JSON `data:` line. Written directly: event names are constants and JSON text never holds a raw newline.
    this.send(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** The SSE id of the position after everything sent so far: `<stdout bytes>-<stderr bytes>`. */
  private id(): string {
    return `${this.cursors.stdout.offset}-${this.cursors.stderr.offset}`;
  }

  /** One chunk as it came, base64-encoded: nothing decoded, nothing carried to the next chunk. */
  private writeBytes(stream: StreamName, bytes: Buffer): void {
    if (bytes.length === 0) return;
    this.cursors[stream].offset += bytes.length;
    const id = this.ids ? `id: ${this.id()}\n` : '';
    this.send(`event: ${stream}\n${id}data: {"stream":"${stream}","data":"${bytes.toString('base64')}"}\n\n`);
  }

  private writeOutput(stream: StreamName, text: string): void {
    const id = this.ids ? `id: ${this.id()}\n` : '';
    this.send(`event: ${stream}\n${id}data: {"stream":"${stream}","data":${JSON.stringify(text)}}\n\n`);
  }

  /**
   * Where the replay meets what comes next (live output, or the end): each
   * stream's output between the two that was not kept (past the cap or the
   * budgets) is one `truncated` event saying how many bytes are missing.
   */
  private handOff(offsets: StreamOffsets | undefined): void {
    if (!offsets || !this.ids) return;
    for (const stream of STREAMS) {
      // Nothing missing when the replay took in every byte up to where the rest starts (a character begun
      // at the end is completed live, or replaced at the end).
      if (offsets[stream] <= this.cursors[stream].consumed) continue;
      // What the client will not see as text: the bytes of a character begun before the cut count with the rest.
      const missing = offsets[stream] - this.cursors[stream].offset;
      this.cursors[stream].dropCarried();
      this.cursors[stream].offset = offsets[stream];
      this.send(`event: truncated\nid: ${this.id()}\ndata: ${JSON.stringify({ stream, bytes: missing })}\n\n`);
    }
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

  /** Replays the log from where this client starts, one read at a time, waiting for the socket to drain between reads. */
  private async replay(log: KeptLog, target: () => ReplayTarget): Promise<void> {
    try {
      for await (const frame of log.framesFrom(() => target().logEnd, this.from)) {
        if (!this.session.isConnected) return;
        this.push(frame.stream, frame.bytes);
        if (this.res.writableNeedDrain) await new Promise<void>((resolve) => (this.wakeReplay = resolve));
        this.wakeReplay = undefined;
      }
    } catch (error) {
      // The headers are out: a failure now ends the stream, with an `error` event that says so.
      this.log.warn({ err: error, pid: this.proc.pid }, 'replaying kept output failed: ending the stream');
      this.abort(`the kept output of pid ${this.proc.pid} could not be read: ${(error as Error).message}`);
      return;
    }
    if (!this.session.isConnected) return;
    this.handOff(target().offsets);
    this.proc.caughtUp(this);
  }
}

const STREAMS = ['stdout', 'stderr'] as const;

function stringHeaders(reply: FastifyReply): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) headers[name] = String(value);
  return headers;
}
