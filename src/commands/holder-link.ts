import { createConnection, type Socket } from 'node:net';
import { checkNodeInternals, readsIntoOwnBuffers } from '../node-internals.js';
import {
  DIRECT_SINCE_VERSION,
  MAX_MESSAGE_PAYLOAD,
  MessageDecoder,
  OFFSETS_SINCE_VERSION,
  TEXT_SINCE_VERSION,
  encodeDirectGo,
  encodeDirectOff,
  encodeDirectOn,
  encodeDirectPing,
  encodeLiveOff,
  encodeLiveOn,
  encodeResize,
  encodeStdin,
  encodeStdinEof,
  type AckStatus,
  type HolderMessage,
} from '../holder/protocol.js';

/** The longest holder message: a DATA or TEXT of 64 KiB and its headers. */
const MAX_MESSAGE_BYTES = 5 + 17 + 64 * 1024;
/** The room kept for a read (Node reads at most the buffer it is given): below it, what is left of a message moves to the front. */
const READ_ROOM_BYTES = 64 * 1024;
/**
 * A link's read buffer: what is left of a message (less than one), moved to
 * its front, and a read after it. Pages are touched only as output comes: an
 * idle link costs a page.
 */
const READ_BUFFER_BYTES = MAX_MESSAGE_BYTES + READ_ROOM_BYTES;
/**
 * Where the first read after a pause lands, for every link (when Node reads as
 * node-internals.ts checks it does, 'onread-buffer'): Node takes a
 * link's next read buffer right after each read, when a held link still has
 * a message queued in its own buffer and nothing may move there. The read's
 * callback copies it into the link's buffer at once, and reads of different
 * sockets never overlap, so one buffer serves all links. (A fresh buffer per
 * such read was an mmap and a munmap here, for a quarter of the reads of a
 * stream whose client is a little slower than its command.)
 */
let parkingBuffer: Buffer | undefined;

/**
 * How long envd waits for a holder's HELLO after connecting. A live holder
 * answers at once, but envd may not get to read it for a while: under a storm
 * of output its event loop runs timers before it reads sockets, and a 5 s
 * timeout once fired on holders that had long since answered.
 */
export const HELLO_TIMEOUT_MS = 30_000;

/**
 * While held, envd decodes no further than one message of output: the rest stays
 * in the link's read buffer (not read again until released), the kernel's socket
 * buffer and the holder's, and the holder stops reading the command.
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
  /**
   * Nothing is delivered until the link's owner listens: a fast command's holder sends REAPED and EXIT
   * right behind its HELLO, often in the same read, and the owner takes the link only once connect()
   * has resolved. Delivered before that, EXIT went nowhere, and the command was found ended only when
   * a reconnect after 100 ms saw its holder gone (issue 36: most of the slowest starts under load).
   */
  private listening = false;

  private readonly decoder = new MessageDecoder();
  private readonly queue: Ordered[] = [];
  private queuedBytes = 0;
  private held = false;
  private delivering = false;
  private nextId = 1;
  private readonly acks = new Map<number, (status: AckStatus | 'closed') => void>();
  private closedFlag = false;
  /** onClose has been called: once every message read before the close was delivered, or at once after close(). */
  private closeReported = false;
  /** envd closed the link itself (close()): what was still queued is dropped, not delivered. */
  private dropping = false;
  /** The holder's protocol version, from its HELLO. */
  private version = 1;
  private readsPaused = false;
  /** True inside a read's callback: the only time the read buffer may be rearranged. */
  private reading = false;

  private onHello: ((hello: Hello) => void) | undefined;
  /** Where in readBuffer the bytes read so far end. */
  private readEnd = 0;
  /** Whether the read under way lands in parkingBuffer (it was placed while reads were paused). */
  private readParked = false;
  private onHelloMissing: (type: string) => void = () => {};

  private constructor(
    private readonly socket: Socket,
    /** Where reads land; undefined on the plain path, where each read brings its own buffer. */
    private readonly readBuffer: Buffer | undefined,
  ) {}

  /** A read on the plain path ('data'): Node's own buffer, never reused, so nothing is moved or copied. */
  private onChunk(chunk: Buffer): void {
    this.decoder.push(chunk);
    this.afterRead();
  }

  /**
   * One read from the socket, into the link's own buffer right after the bytes read before it, so a
   * message split between two reads is whole in place (the decoder joins adjacent views) instead of
   * copied. Returns false to stop reading (Node's onread contract).
   */
  private onRead(n: number): boolean {
    if (this.readParked) {
      // Reads resumed, so nothing is queued: what is left of a message moves to the front, the read after it.
      this.compact();
      parkingBuffer!.copy(this.readBuffer!, this.readEnd, 0, n);
    }
    this.decoder.push(this.readBuffer!.subarray(this.readEnd, this.readEnd + n));
    this.readEnd += n;
    this.reading = true;
    try {
      return this.afterRead();
    } finally {
      this.reading = false;
    }
  }

  private afterRead(): boolean {
    if (this.onHello) {
      const first = this.decoder.next();
      if (first === undefined) {
        this.settleReads();
        return !this.readsPaused;
      }
      const onHello = this.onHello;
      this.onHello = undefined;
      if (first.type !== 'hello') {
        this.onHelloMissing(first.type);
        return false;
      }
      onHello(first);
    }
    this.deliver();
    return !this.readsPaused;
  }

  /**
   * Connects to a holder's socket and resolves with its HELLO (the command's state at this moment).
   * Rejects when the connect fails or no HELLO came within `helloTimeoutMs`: the holder may still be
   * alive (stopped, or its backlog full), which only its pid record can tell (TrackedProcess).
   */
  static async connect(path: string, helloTimeoutMs = HELLO_TIMEOUT_MS): Promise<{ link: HolderLink; hello: Hello }> {
    // Whether Node reads a socket as the own buffers below assume is known once this has settled.
    await checkNodeInternals();
    return new Promise((resolve, reject) => {
      let link: HolderLink | undefined;
      let socket: Socket;
      if (readsIntoOwnBuffers()) {
        // Reads land in one buffer per link instead of a fresh 64 KiB allocation per read, and a message
        // split between two reads is completed in place instead of copied: a busy command's output then
        // costs envd no allocation at all, and a held link pins nothing but this buffer.
        const readBuffer = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
        // Node asks for the next read's buffer right after each read's callback (and once at the start).
        socket = createConnection({ path, onread: { buffer: () => link?.nextReadTarget() ?? readBuffer, callback: (n) => link!.onRead(n) } });
        link = new HolderLink(socket, readBuffer);
      } else {
        // The plain path (node-internals.ts): a fresh buffer per read, which queued messages may point into.
        socket = createConnection({ path });
        link = new HolderLink(socket, undefined);
        socket.on('data', (chunk: Buffer) => link!.onChunk(chunk));
      }
      const timer = setTimeout(() => fail(new Error(`no HELLO from the holder at ${path}`)), helloTimeoutMs);
      const fail = (error: Error) => {
        clearTimeout(timer);
        socket.destroy();
        reject(error);
      };
      socket.once('error', fail);
      link.onHello = (hello) => {
        clearTimeout(timer);
        link.version = hello.version;
        link.decoder.version = hello.version;
        socket.off('error', fail);
        link.wire();
        resolve({ link, hello });
      };
      link.onHelloMissing = (type) => fail(new Error(`the holder at ${path} sent ${type} before HELLO`));
    });
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** Takes the link: from now on its messages reach `onMessage` (those read with the HELLO first) and its end `onClose`. */
  listen(onMessage: (message: Ordered) => void, onClose: () => void): void {
    this.onMessage = onMessage;
    this.onClose = onClose;
    this.listening = true;
    this.deliver();
  }

  hold(): void {
    this.held = true;
  }

  release(): void {
    if (!this.held) return;
    this.held = false;
    this.deliver();
  }

  /** Whether the holder can send output as TEXT (protocol 2 on; an older one re-adopted after an upgrade sends DATA only). */
  get speaksText(): boolean {
    return this.version >= TEXT_SINCE_VERSION;
  }

  /** LIVE on: output as TEXT when asked and the holder speaks it, else DATA. */
  liveOn(text = true): void {
    this.write(encodeLiveOn(text && this.speaksText));
  }

  liveOff(): void {
    this.write(encodeLiveOff());
  }

  /** Whether the holder says where each stream's output is (protocol 4): SSE ids and resuming need it. */
  get knowsOffsets(): boolean {
    return this.version >= OFFSETS_SINCE_VERSION;
  }

  /** Whether the holder can be lent a stream client's socket (protocol 3). */
  get lendsSockets(): boolean {
    return this.version >= DIRECT_SINCE_VERSION;
  }

  /** Lends the holder fd `fd` of this process, a client's socket of inode `inode`; DIRECT_READY or DIRECT_ENDED answers. */
  directOn(fd: number, inode: number, chunked: boolean): void {
    this.write(encodeDirectOn(process.pid, fd, inode, chunked));
  }

  directGo(): void {
    this.write(encodeDirectGo());
  }

  directOff(): void {
    this.write(encodeDirectOff());
  }

  directPing(): void {
    this.write(encodeDirectPing());
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

  /** Closes the link from envd's side: nothing queued is delivered any more, onClose follows at once. */
  close(): void {
    this.dropping = true;
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
    // A write to a holder that just exited fails with EPIPE; 'close' follows and says all there is to say.
    this.socket.on('error', () => {});
    this.socket.once('close', () => {
      this.closedFlag = true;
      for (const resolve of this.acks.values()) resolve('closed');
      this.acks.clear();
      // Whatever the holder sent before it closed still counts (EXIT is usually the last message): it is
      // delivered, held or not, before onClose says the holder is gone (deliver() reports it).
      this.deliver();
    });
    this.deliver();
  }

  /** Moves messages from the socket to the queue and from the queue to onMessage while not held. */
  private deliver(): void {
    if (this.delivering || !this.listening) return;
    this.delivering = true;
    try {
      if (this.dropping) {
        this.queue.length = 0;
        this.queuedBytes = 0;
      }
      for (;;) {
        if (!this.held && this.queue.length > 0) {
          const message = this.queue.shift()!;
          this.queuedBytes -= outputBytes(message);
          this.onMessage(message);
          continue;
        }
        // Once closed, everything read is decoded: no read can come after it, so nothing moves in the buffer.
        if (this.queuedBytes >= HELD_QUEUE_BYTES && !this.closedFlag) break;
        const message = this.dropping ? undefined : this.decoder.next();
        if (message === undefined) break;
        if (message.type === 'ack') {
          this.acks.get(message.id)?.(message.status);
          this.acks.delete(message.id);
        } else if (message.type === 'reaped') {
          // Not ordered with output: kills must learn at once that the pid may be reused.
          this.onMessage(message);
        } else if (message.type !== 'hello') {
          this.queuedBytes += outputBytes(message);
          this.queue.push(message);
        }
      }
    } finally {
      this.delivering = false;
    }
    this.settleReads();
    // The holder is gone once all it sent has been delivered (a held link delivers the rest when released).
    if (this.closedFlag && this.queue.length === 0 && !this.closeReported) {
      this.closeReported = true;
      this.onClose();
    }
  }

  /**
   * Queued messages point into the read buffer: no read until they are delivered. Otherwise a
   * partial message is copied out of it, and reading goes on.
   */
  private settleReads(): void {
    if (this.closedFlag) return;
    if (this.queue.length > 0) {
      this.readsPaused = true;
      this.socket.pause();
      return;
    }
    // Room for the next read, made only between a read and the next one being placed: Node has
    // taken the next read's buffer already when reads resume from elsewhere.
    if (this.reading && this.readBuffer && this.readBuffer.length - this.readEnd < READ_ROOM_BYTES) this.compact();
    this.readsPaused = false;
    this.socket.resume();
  }

  /** Moves what is left of a message (nothing queued points into the buffer) to its front. */
  private compact(): void {
    const readBuffer = this.readBuffer!;
    const partial = this.decoder.takeBuffered();
    partial.copy(readBuffer, 0);
    this.decoder.push(readBuffer.subarray(0, partial.length));
    this.readEnd = partial.length;
  }

  /**
   * Where the next read lands: right after what was read (a read's callback leaves room for a whole
   * read there unless reads are paused), or, while paused with a message queued, the parking buffer.
   */
  private nextReadTarget(): Buffer {
    this.readParked = this.readsPaused;
    if (!this.readParked) return this.readBuffer!.subarray(this.readEnd);
    return (parkingBuffer ??= Buffer.allocUnsafeSlow(READ_ROOM_BYTES));
  }
}

/** The output a message carries (DATA or TEXT), for the held link's bound. */
function outputBytes(message: Ordered): number {
  if (message.type === 'data') return message.bytes.length;
  if (message.type === 'text') return message.json.length;
  return 0;
}
