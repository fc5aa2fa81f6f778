import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** After answering early, envd reads and drops what the client still sends for at most this long... */
export const LINGER_MAX_MS = 5_000;
/** ...and stops sooner when the client sends nothing for this long... */
export const LINGER_IDLE_MS = 2_000;
/** ...or has sent this many more bytes (twice the upload limit: a client that writes its whole body before reading still gets to read the answer). */
export const LINGER_MAX_BYTES = 1024 * 1024 * 1024;

export interface LingerBounds {
  maxMs: number;
  idleMs: number;
  maxBytes: number;
}

const DEFAULT_BOUNDS: LingerBounds = { maxMs: LINGER_MAX_MS, idleMs: LINGER_IDLE_MS, maxBytes: LINGER_MAX_BYTES };

const lingering = new WeakSet<Socket>();

/**
 * For an answer sent before the request body was read to its end (413, 401,
 * 400, a failed upload): the answer says `Connection: close`, and the
 * connection is closed the way RFC 9112 §9.6 asks, not at once.
 *
 * Node closes a `Connection: close` response with `socket.destroySoon()`,
 * which destroys the socket as soon as the answer is flushed. With request
 * bytes still unread, the kernel then resets the connection, and a client
 * still sending (or a proxy streaming its body, such as nginx with
 * `proxy_request_buffering off`) gets EPIPE/ECONNRESET instead of the answer,
 * or a 502. So for this one socket, destroySoon is replaced: the write side is
 * half-closed after the answer, what arrives is read and dropped (no memory
 * kept), and the socket is destroyed once the body has ended, the client has
 * closed, or a bound is reached (time, idle time, bytes).
 */
export function closeAfterLingering(req: IncomingMessage, res: ServerResponse, bounds: LingerBounds = DEFAULT_BOUNDS): void {
  if (!res.headersSent) res.setHeader('connection', 'close');
  const socket = req.socket;
  if (lingering.has(socket)) return;
  lingering.add(socket);
  socket.destroySoon = () => linger(req, socket, bounds);
}

function linger(req: IncomingMessage, socket: Socket, { maxMs, idleMs, maxBytes }: LingerBounds): void {
  if (socket.destroyed) return;
  // FIN after the answer: the client knows nothing more comes, and may stop sending.
  socket.end();
  if (req.complete) return done();
  let discarded = 0;
  const deadline = setTimeout(done, maxMs);
  const idle = setTimeout(done, idleMs);
  function done() {
    clearTimeout(deadline);
    clearTimeout(idle);
    socket.destroy();
  }
  socket.once('close', done);
  req.once('end', done);
  // A reader that stopped (a failed upload's iterator) left the body paused: take it over and drop it.
  req.removeAllListeners('readable');
  req.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    idle.refresh();
    if (discarded > maxBytes) done();
  });
  req.resume();
}
