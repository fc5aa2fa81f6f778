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

/** How often a lingering connection's progress is checked against the bounds. */
const CHECK_EVERY_MS = 50;

function linger(req: IncomingMessage, socket: Socket, { maxMs, idleMs, maxBytes }: LingerBounds): void {
  if (socket.destroyed) return;
  // FIN after the answer: a client that notices stops sending and closes.
  socket.end();
  if (req.complete) return closeWhenFlushed(socket);
  // Progress is read from the socket, whoever consumes the bytes: Node's
  // parser drops a dumped body without emitting it.
  const startedAt = Date.now();
  const startBytes = socket.bytesRead;
  let lastBytes = startBytes;
  let lastProgressAt = startedAt;
  const check = setInterval(() => {
    const now = Date.now();
    if (socket.bytesRead !== lastBytes) {
      lastBytes = socket.bytesRead;
      lastProgressAt = now;
    }
    if (now - startedAt >= maxMs || now - lastProgressAt >= idleMs || lastBytes - startBytes > maxBytes) {
      // A bound: whatever is still unsent or unread goes too.
      clearInterval(check);
      socket.destroy();
    }
  }, CHECK_EVERY_MS);
  socket.once('close', () => clearInterval(check));
  // The body has ended: nothing unread remains, so closing resets nothing.
  req.once('end', () => {
    clearInterval(check);
    closeWhenFlushed(socket);
  });
  // A reader that stopped (a failed upload's iterator) left the body paused:
  // let it flow to no listener, which drops it.
  req.removeAllListeners('readable');
  req.removeAllListeners('data');
  req.resume();
}

/** Destroys the socket once the answer has left Node's buffers (what destroySoon did). */
function closeWhenFlushed(socket: Socket): void {
  if (socket.writableFinished) socket.destroy();
  else socket.once('finish', () => socket.destroy());
}
