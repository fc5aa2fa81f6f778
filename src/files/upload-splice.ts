import { spawn } from 'node:child_process';
import type { FileHandle } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import { constants } from 'node:os';
import { HttpError, errnoToHttpError } from '../errors.js';

/**
 * Raw uploads with a Content-Length of at least this many bytes have their
 * body moved by the holder's --receive mode (src/holder/receive.c) with
 * splice(2): socket -> pipe -> file in the kernel, no copy through envd's
 * heap and no JavaScript per chunk. Below it, the ~2 ms of a spawn would cost
 * more than it saves, and Node's stream path writes the file.
 */
export const SPLICE_MIN_BYTES = 1024 * 1024;

/** How the receiver ended: its one line on stdout (receive.c). */
type Outcome = { kind: 'ok' | 'short' | 'idle'; bytes: number } | { kind: 'error'; errno: number; bytes: number };

const ERRNO_CODES = new Map(Object.entries(constants.errno).map(([code, number]) => [number, code]));

/**
 * The body length when this upload can be spliced: a Content-Length (no
 * chunked framing to parse) of at least SPLICE_MIN_BYTES, on a plain TCP
 * socket (a TLS one carries ciphertext) that Node still owns.
 */
export function spliceableLength(request: IncomingMessage): number | undefined {
  if (request.headers['transfer-encoding'] !== undefined) return undefined;
  const length = Number(request.headers['content-length']);
  if (!Number.isSafeInteger(length) || length < SPLICE_MIN_BYTES) return undefined;
  const socket = request.socket as Socket & { encrypted?: boolean; _handle?: { fd?: number } };
  if (!(socket instanceof Socket) || socket.encrypted || !(socket._handle?.fd! >= 0) || socket.destroyed) return undefined;
  return length;
}

/**
 * Fills `handle` with the request's body of `length` bytes and closes it: the
 * bytes Node's HTTP parser has already read come from the request, the rest
 * from the socket through the receiver, which flushes the file to disk.
 *
 * Afterwards the parser still counts the spliced bytes as unread: on success
 * the request is marked complete and the caller must close the connection
 * (`Connection: close`); on failure the request reads again, so that the
 * answer's lingering close drains what the client still sends.
 */
export async function spliceBody(request: IncomingMessage, handle: FileHandle, length: number, receiver: string): Promise<void> {
  // From here the request must never ask the socket for more: the receiver owns its bytes. `_read` is
  // what a paused request calls to resume the socket (Readable's implementer hook); a no-op keeps it off.
  const ownRead = Object.getOwnPropertyDescriptor(request, '_read');
  request._read = () => {};
  let restoreReads = true;
  try {
    // Synchronously, up to the spawn: no read of the socket can come in between.
    const early: Buffer[] = [];
    let earlyBytes = 0;
    for (let chunk: Buffer | null; (chunk = request.read() as Buffer | null) !== null; ) {
      early.push(chunk);
      earlyBytes += chunk.length;
    }
    if (earlyBytes > length) throw new HttpError(400, `the body is longer than its Content-Length of ${length} bytes`);
    // The whole body was read already: nothing for the kernel to move.
    if (earlyBytes === length) {
      await handle.writev(early, 0);
      await handle.sync();
      request.complete = true;
      restoreReads = false;
      return;
    }
    // spawn() stops Node's reads of the socket before it returns; the receiver writes the early bytes (its stdin) in front.
    const ended = await runReceiver(receiver, request.socket, handle.fd, length - earlyBytes, early, earlyBytes);
    if (ended.kind === 'short') throw new HttpError(400, 'upload aborted by the client');
    if (ended.kind === 'idle') throw new HttpError(408, 'upload stalled: no body bytes for 60 s');
    if (ended.kind === 'error') throw errnoToHttpError(Object.assign(new Error(`upload receiver: ${ERRNO_CODES.get(ended.errno) ?? ended.errno}`), { code: ERRNO_CODES.get(ended.errno) }), 'upload');
    request.complete = true;
    restoreReads = false;
  } finally {
    await handle.close();
    if (restoreReads) {
      if (ownRead) Object.defineProperty(request, '_read', ownRead);
      else delete (request as { _read?: unknown })._read;
    }
  }
}

/** Spawns the receiver on the early bytes (stdin), the socket (fd 3) and the file (fd 4), and resolves with its outcome once it has exited. */
function runReceiver(receiver: string, socket: Socket, fd: number, bytes: number, early: Buffer[], earlyBytes: number): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(receiver, ['--receive', String(bytes), String(earlyBytes)], { stdio: ['pipe', 'pipe', 'ignore', socket, fd] });
    // EPIPE if it failed before reading them: its outcome line says why.
    child.stdin!.on('error', () => {});
    for (const chunk of early) child.stdin!.write(chunk);
    child.stdin!.end();
    let line = '';
    child.stdout!.setEncoding('utf8').on('data', (text: string) => (line += text));
    child.once('error', (error) => reject(errnoToHttpError(error, 'upload receiver')));
    child.once('close', (code) => {
      const [kind, a, b] = line.trim().split(' ');
      if (kind === 'ok' || kind === 'short' || kind === 'idle') resolve({ kind, bytes: Number(a) });
      else if (kind === 'error') resolve({ kind, errno: Number(a), bytes: Number(b) });
      else reject(new Error(`upload receiver exited with ${code} and said ${JSON.stringify(line)}`));
    });
  });
}
