import { createConnection, type Socket } from 'node:net';
import {
  MAX_MESSAGE_PAYLOAD,
  MessageDecoder,
  encodeLiveOff,
  encodeLiveOn,
  encodeResize,
  encodeStdin,
  encodeStdinEof,
  type AckStatus,
  type HolderMessage,
} from '../holder/protocol.js';

/** How long envd waits for a holder's HELLO after connecting; a live holder answers at once. */
export const HELLO_TIMEOUT_MS = 5_000;

/**
 * While held, envd stops reading the socket once this much output is queued:
 * the rest stays in the kernel's socket buffer and the holder's, and the holder
 * stops reading the command. One socket read (64 KiB) is what a held link costs.
 */
const HELD_QUEUE_BYTES = 1;

type Hello = Extract<HolderMessage, { type: 'hello' }>;
type Ordered = Exclude<HolderMessage, { type: 'ack' | 'hello' }>;

/**
 * envd's end of one holder's live channel. Messages reach `onMessage` one at
 * a time, in order; `hold()` stops that between two messages (a subscriber is
 * behind) and `release()` goes on. Acknowledgements are matched to their
 * request at once, even while held, so stdin never waits for a slow reader.
 */
export class HolderLink {
  onMessage: (message: Ordered) => void = () => {};
  onClose: () => void = () => {};

  private readonly decoder = new MessageDecoder();
  private readonly queue: Ordered[] = [];
  private queuedBytes = 0;
  private held = false;
  private delivering = false;
  private nextId = 1;
  private readonly acks = new Map<number, (status: AckStatus | 'closed') => void>();
  private closedFlag = false;

  private constructor(private readonly socket: Socket) {}

  /** Connects to a holder's socket and resolves with its HELLO (the command's state at this moment). */
  static connect(path: string): Promise<{ link: HolderLink; hello: Hello }> {
    return new Promise((resolve, reject) => {
      const socket = createConnection(path);
      const link = new HolderLink(socket);
      const timer = setTimeout(() => fail(new Error(`no HELLO from the holder at ${path}`)), HELLO_TIMEOUT_MS);
      const fail = (error: Error) => {
        clearTimeout(timer);
        socket.destroy();
        reject(error);
      };
      socket.once('error', fail);
      const onFirst = (chunk: Buffer) => {
        link.decoder.push(chunk);
        const first = link.decoder.next();
        if (first === undefined) return;
        clearTimeout(timer);
        socket.off('data', onFirst);
        socket.off('error', fail);
        if (first.type !== 'hello') return fail(new Error(`the holder at ${path} sent ${first.type} before HELLO`));
        link.wire();
        resolve({ link, hello: first });
      };
      socket.on('data', onFirst);
    });
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  hold(): void {
    this.held = true;
  }

  release(): void {
    if (!this.held) return;
    this.held = false;
    this.deliver();
  }

  liveOn(): void {
    this.write(encodeLiveOn());
  }

  liveOff(): void {
    this.write(encodeLiveOff());
  }

  /** Writes to the command's stdin (or terminal) in pieces the holder accepts; resolves when all were written. */
  async stdin(bytes: Buffer): Promise<AckStatus | 'closed'> {
    const piece = MAX_MESSAGE_PAYLOAD - 4;
    for (let offset = 0; offset === 0 || offset < bytes.length; offset += piece) {
      const status = await this.request((id) => encodeStdin(id, bytes.subarray(offset, offset + piece)));
      if (status !== 0) return status;
    }
    return 0;
  }

  stdinEof(): Promise<AckStatus | 'closed'> {
    return this.request((id) => encodeStdinEof(id));
  }

  resize(cols: number, rows: number): Promise<AckStatus | 'closed'> {
    return this.request((id) => encodeResize(id, cols, rows));
  }

  close(): void {
    this.socket.destroy();
  }

  private request(encode: (id: number) => Buffer): Promise<AckStatus | 'closed'> {
    if (this.closedFlag) return Promise.resolve('closed');
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.acks.set(id, resolve);
      this.write(encode(id));
    });
  }

  private write(message: Buffer): void {
    if (!this.closedFlag) this.socket.write(message);
  }

  private wire(): void {
    this.socket.on('data', (chunk: Buffer) => {
      this.decoder.push(chunk);
      this.deliver();
    });
    // A write to a holder that just exited fails with EPIPE; 'close' follows and says all there is to say.
    this.socket.on('error', () => {});
    this.socket.once('close', () => {
      this.closedFlag = true;
      for (const resolve of this.acks.values()) resolve('closed');
      this.acks.clear();
      // Whatever was decoded before the close still counts (EXIT is usually the last message).
      this.deliver();
      this.onClose();
    });
    this.deliver();
  }

  /** Moves messages from the socket to the queue and from the queue to onMessage while not held. */
  private deliver(): void {
    if (this.delivering) return;
    this.delivering = true;
    try {
      for (;;) {
        if (!this.held && this.queue.length > 0) {
          const message = this.queue.shift()!;
          if (message.type === 'data') this.queuedBytes -= message.bytes.length;
          this.onMessage(message);
          continue;
        }
        if (this.queuedBytes >= HELD_QUEUE_BYTES) break;
        const message = this.decoder.next();
        if (message === undefined) break;
        if (message.type === 'ack') {
          this.acks.get(message.id)?.(message.status);
          this.acks.delete(message.id);
        } else if (message.type === 'reaped') {
          // Not ordered with output: kills must learn at once that the pid may be reused.
          this.onMessage(message);
        } else if (message.type !== 'hello') {
          if (message.type === 'data') this.queuedBytes += message.bytes.length;
          this.queue.push(message);
        }
      }
    } finally {
      this.delivering = false;
    }
    if (this.closedFlag) return;
    // Not `decoder.buffered`: a partial message must be read to its end, or nothing would ever resume the socket.
    if (this.held && this.queuedBytes >= HELD_QUEUE_BYTES) this.socket.pause();
    else this.socket.resume();
  }
}
