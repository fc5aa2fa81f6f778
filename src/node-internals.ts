import { fstatSync, writeSync } from 'node:fs';
import { IncomingMessage, ServerResponse } from 'node:http';
import { createConnection, createServer, Socket, type Server } from 'node:net';
import type { Logger } from './logger.js';

/**
 * Node's private internals that envd relies on, read in this module and
 * nowhere else. Each is checked once at start-up (checkNodeInternals): one
 * that no longer behaves as assumed (a Node upgrade changed it) is logged once
 * and its feature takes the plain public path, slower but never wrong.
 * docs/operations.md lists them for whoever upgrades Node.
 */
export const NODE_INTERNALS = {
  'socket-fd': {
    reads: 'net.Socket#_handle.fd: the descriptor of a connection',
    for: 'lending a stream client\'s socket to the holder (direct output); handing a large upload\'s socket to the holder (splice)',
    without: 'envd writes every stream event itself; uploads are read through Node\'s HTTP parser',
  },
  'chunked-encoding': {
    reads: 'http.ServerResponse#chunkedEncoding: whether the body goes out in HTTP chunks',
    for: 'lending a stream client\'s socket (the holder frames what it writes the same way)',
    without: 'envd writes every stream event itself',
  },
  'request-read': {
    reads: 'IncomingMessage#_read (replaced by a no-op so the parser stops reading the socket) and #complete (set)',
    for: 'taking a large upload\'s body from Node\'s HTTP parser (splice, archive relay)',
    without: 'uploads are read through Node\'s HTTP parser',
  },
  'onread-buffer': {
    reads: 'when net.Socket calls onread.buffer(): once before the first read, then only after each read\'s callback',
    for: 'holder links reading into one buffer of their own (and the shared parking buffer of a paused link)',
    without: 'holder links read through plain \'data\' events, one fresh buffer per read',
  },
} as const;

export type NodeInternal = keyof typeof NODE_INTERNALS;
const NAMES = Object.keys(NODE_INTERNALS) as NodeInternal[];

/** How long the socket checks may take before the internals they check are taken for changed. */
const SOCKET_CHECK_DEADLINE_MS = 5_000;

/** What was found to behave as assumed; nothing until the check has run. */
const trusted = new Set<NodeInternal>();
let checked: Promise<void> | undefined;

/**
 * Checks every internal once (later calls return the same promise). `distrust`: names to treat as
 * changed without checking, comma-separated, or `all` (ENVD_DISTRUST_NODE_INTERNALS: a way to run
 * on the public paths alone, and how the tests prove those paths deliver every byte).
 */
export function checkNodeInternals({ logger, distrust = '' }: { logger?: Logger; distrust?: string } = {}): Promise<void> {
  checked ??= runChecks(new Set(distrust === 'all' ? NAMES : distrust.split(',').map((name) => name.trim())), logger);
  return checked;
}

/** Whether `name` was checked and behaves as assumed. False until checkNodeInternals has settled. */
export function trusts(name: NodeInternal): boolean {
  return trusted.has(name);
}

async function runChecks(distrusted: Set<string>, logger: Logger | undefined): Promise<void> {
  const found: Partial<Record<NodeInternal, string | undefined>> = {
    'chunked-encoding': guard(checkChunkedEncoding),
    'request-read': guard(checkRequestRead),
    ...(await checkSockets().catch((error: unknown) => ({ 'socket-fd': String(error), 'onread-buffer': String(error) }))),
  };
  for (const name of NAMES) {
    const problem = distrusted.has(name) ? 'distrusted by ENVD_DISTRUST_NODE_INTERNALS' : found[name];
    if (problem === undefined) {
      trusted.add(name);
      continue;
    }
    const { reads, without } = NODE_INTERNALS[name];
    logger?.warn({ internal: name, reads, problem, nodeVersion: process.version }, `a Node internal does not behave as envd assumes: ${without}`);
  }
}

/** A check's problem, or undefined when all is as assumed; a check that throws has found one. */
function guard(check: () => string | undefined): string | undefined {
  try {
    return check();
  } catch (error) {
    return `the check threw: ${(error as Error).message}`;
  }
}

// ---- The readers: the only code in envd that touches these internals. ----

/** The descriptor of a connection (plain TCP or a unix socket; never TLS, whose bytes on the fd are not the stream's). */
export function socketFd(socket: Socket | null | undefined): number | undefined {
  if (!socket || !trusted.has('socket-fd') || 'encrypted' in socket || socket.destroyed) return undefined;
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : undefined;
}

/** Whether a response whose headers are out frames its body in HTTP chunks; undefined if that cannot be told. */
export function responseChunked(res: ServerResponse): boolean | undefined {
  if (!trusted.has('chunked-encoding')) return undefined;
  const chunked = (res as unknown as { chunkedEncoding?: unknown }).chunkedEncoding;
  return typeof chunked === 'boolean' ? chunked : undefined;
}

/** Whether a request's body may be taken from Node's parser (takeBodyFromParser). */
export function bodyTakeoverTrusted(): boolean {
  return trusted.has('request-read') && trusted.has('socket-fd');
}

/**
 * Stops the parser's request from reading its socket: `_read` is what a paused request calls to
 * resume the socket (Readable's implementer hook); a no-op keeps it off. Returns how to undo it,
 * or (`completed`) to mark the body read, though the parser still counts those bytes as unread.
 */
export function stopParserReads(request: IncomingMessage): (completed: boolean) => void {
  const own = Object.getOwnPropertyDescriptor(request, '_read');
  request._read = () => {};
  return (completed) => {
    if (completed) {
      request.complete = true;
      return;
    }
    if (own) Object.defineProperty(request, '_read', own);
    else delete (request as { _read?: unknown })._read;
  };
}

/** Whether holder links may read into buffers of their own (onread), moved and reused as holder-link.ts does. */
export function readsIntoOwnBuffers(): boolean {
  return trusted.has('onread-buffer');
}

// ---- The checks. ----

/** A response without a length frames in chunks and says so; one with a length, or to HTTP/1.0, does not. */
function checkChunkedEncoding(): string | undefined {
  const chunked = (version: number, headers: Record<string, string>) => {
    const request = new IncomingMessage(new Socket());
    Object.assign(request, { method: 'GET', httpVersionMajor: 1, httpVersionMinor: version, headers: {} });
    const res = new ServerResponse(request);
    res.writeHead(200, headers);
    const header = String((res as unknown as { _header?: unknown })._header ?? '');
    return { chunked: (res as unknown as { chunkedEncoding?: unknown }).chunkedEncoding, says: /\r\ntransfer-encoding: chunked\r\n/i.test(header) };
  };
  const stream = chunked(1, { 'content-type': 'text/event-stream' });
  if (stream.chunked !== true || !stream.says) return `a streamed HTTP/1.1 response has chunkedEncoding ${String(stream.chunked)}, chunked header ${stream.says}`;
  const sized = chunked(1, { 'content-length': '3' });
  if (sized.chunked !== false || sized.says) return `a response with a Content-Length has chunkedEncoding ${String(sized.chunked)}`;
  const old = chunked(0, {});
  if (old.chunked !== false) return `a response to HTTP/1.0 has chunkedEncoding ${String(old.chunked)}`;
  return undefined;
}

/** A request's own `_read` resumes its socket when read; an instance's `_read` replaces it; `complete` can be set. */
function checkRequestRead(): string | undefined {
  const counts = { resumed: 0 };
  const socket = { readable: true, _paused: false, readableHighWaterMark: 16 * 1024, resume: () => counts.resumed++ };
  const resumedTimes = () => counts.resumed;
  const parsed = new IncomingMessage(socket as unknown as Socket);
  parsed.read();
  if (resumedTimes() !== 1) return `reading a request resumed its socket ${resumedTimes()} times, not once`;
  const taken = new IncomingMessage(socket as unknown as Socket);
  const undo = stopParserReads(taken);
  taken.read();
  if (resumedTimes() !== 1) return 'a request whose _read is replaced still resumed its socket';
  undo(true);
  if (taken.complete !== true) return 'a request cannot be marked complete';
  const given = new IncomingMessage(socket as unknown as Socket);
  stopParserReads(given)(false);
  given.read();
  if (resumedTimes() !== 2) return 'a request whose _read was given back did not resume its socket';
  return undefined;
}

/**
 * Over a connection of this process to itself (a unix socket in the abstract namespace: no file, no
 * network): the client's `_handle.fd` is that connection (bytes written to it arrive at the other end),
 * and onread asks for a buffer once before the first read and once after each read's callback, each
 * read landing in the buffer asked for last.
 */
async function checkSockets(): Promise<Partial<Record<'socket-fd' | 'onread-buffer', string>>> {
  const server = createServer();
  // Abstract names are per network namespace, which envds in pid namespaces of their own may share: a random part.
  const path = `\0envd-node-internals-${process.pid}-${Math.random().toString(36).slice(2)}`;
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(path, resolve));
  const chunks = ['one', 'two', 'three'];
  const order: string[] = [];
  const buffers: Buffer[] = [];
  let onreadProblem: string | undefined;
  let gotChunk: (() => void) | undefined;
  const client = createConnection({
    path,
    onread: {
      buffer: () => {
        order.push('buffer');
        buffers.push(Buffer.alloc(64));
        return buffers.at(-1)!;
      },
      callback: (n, buf) => {
        order.push('read');
        const expected = chunks[order.filter((step) => step === 'read').length - 1];
        if (buf !== buffers.at(-1) || Buffer.from(buf.buffer, buf.byteOffset, n).toString('latin1') !== expected) onreadProblem ??= `a read of ${n} bytes did not land in the buffer asked for last`;
        gotChunk?.();
        return true;
      },
    },
  });
  try {
    return await withDeadline(server, client, async () => {
      const peer = await new Promise<Socket>((resolve) => server.once('connection', (socket: Socket) => resolve(socket)));
      await new Promise<void>((resolve) => (client.connecting ? client.once('connect', resolve) : resolve()));
      const fdProblem = await checkFdWrites(client, peer);
      for (const chunk of chunks) {
        const read = new Promise<void>((resolve) => (gotChunk = resolve));
        peer.write(chunk);
        await read;
      }
      const expectedOrder = ['buffer', ...chunks.flatMap(() => ['read', 'buffer'])].join(' ');
      if (order.join(' ') !== expectedOrder) onreadProblem ??= `onread asked for buffers in the order ${order.join(' ')}`;
      peer.destroy();
      return { 'socket-fd': fdProblem, 'onread-buffer': onreadProblem };
    });
  } finally {
    client.destroy();
    server.close();
  }
}

/** What is written to the client's `_handle.fd` arrives at its peer. */
async function checkFdWrites(client: Socket, peer: Socket): Promise<string | undefined> {
  const fd = (client as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) return `_handle.fd is ${String(fd)}`;
  if (!fstatSync(fd).isSocket()) return `_handle.fd ${fd} is not a socket`;
  const arrived = new Promise<string>((resolve) => peer.once('data', (data) => resolve(String(data))));
  writeSync(fd, 'envd');
  const text = await arrived;
  return text === 'envd' ? undefined : `bytes written to _handle.fd arrived as ${JSON.stringify(text)}`;
}

async function withDeadline<T>(server: Server, client: Socket, work: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the socket checks did not finish within ${SOCKET_CHECK_DEADLINE_MS} ms`)), SOCKET_CHECK_DEADLINE_MS);
  });
  client.once('error', () => {});
  server.once('error', () => {});
  try {
    return await Promise.race([work(), deadline]);
  } finally {
    clearTimeout(timer);
  }
}
