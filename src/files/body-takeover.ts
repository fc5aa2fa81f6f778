import { spawn, type ChildProcess } from 'node:child_process';
import type { IncomingMessage } from 'node:http';
import { Socket } from 'node:net';
import { constants } from 'node:os';
import { HttpError, errnoToHttpError } from '../errors.js';
import { bodyTakeoverTrusted, socketFd, stopParserReads } from '../node-internals.js';

/**
 * Large bodies with a Content-Length of at least this many bytes are taken
 * from Node's HTTP parser and read by a mode of the holder binary instead:
 * --receive splices a raw upload into its file (upload-splice.ts), --relay
 * hashes an archive on its way to envd (archive-relay.ts). Below it, the
 * ~2 ms of a spawn would cost more than it saves.
 */
export const SPLICE_MIN_BYTES = 1024 * 1024;

/** How a holder mode that read a body ended: its one line on stdout (receive.c, relay.c). */
export type BodyOutcome = { kind: 'ok'; bytes: number; sha256?: string } | { kind: 'short' | 'idle'; bytes: number } | { kind: 'error'; errno: number; bytes: number };

const ERRNO_CODES = new Map(Object.entries(constants.errno).map(([code, number]) => [number, code]));

/**
 * The body length when this request's body can be taken over: a
 * Content-Length (no chunked framing to parse) of at least SPLICE_MIN_BYTES,
 * on a plain TCP socket (a TLS one carries ciphertext) that Node still owns,
 * where the internals the take-over needs behave as assumed (node-internals.ts).
 */
export function spliceableLength(request: IncomingMessage): number | undefined {
  if (request.headers['transfer-encoding'] !== undefined) return undefined;
  const length = Number(request.headers['content-length']);
  if (!Number.isSafeInteger(length) || length < SPLICE_MIN_BYTES) return undefined;
  // Node internals (the connection's fd, the parser's reads), read in node-internals.ts: where they do not
  // behave as assumed, the body goes through the parser.
  if (!bodyTakeoverTrusted() || !(request.socket instanceof Socket) || socketFd(request.socket) === undefined) return undefined;
  return length;
}

/** A body taken from Node's parser: what it had read already, and how to give the request back. */
export interface TakenBody {
  /** The bytes Node's parser had read before the take-over, in order. */
  early: Buffer[];
  earlyBytes: number;
  /**
   * Ends the take-over. After a whole body (`completed`) the request is
   * marked complete, though the parser still counts those bytes as unread:
   * the caller must close the connection (`Connection: close`). Otherwise the
   * request reads again, so that the answer's lingering close drains what
   * the client still sends.
   */
  handBack(completed: boolean): void;
}

/**
 * Stops the request from reading its socket and collects what it has read
 * already. Synchronous up to the caller's spawn: no read of the socket can
 * come in between, and spawn() stops Node's reads of the socket before it
 * returns. Throws a 400 when the parser has read more than `length` bytes.
 */
export function takeOverBody(request: IncomingMessage, length: number): TakenBody {
  const handBack = stopParserReads(request);
  const early: Buffer[] = [];
  let earlyBytes = 0;
  for (let chunk: Buffer | null; (chunk = request.read() as Buffer | null) !== null; ) {
    early.push(chunk);
    earlyBytes += chunk.length;
  }
  if (earlyBytes > length) {
    handBack(false);
    throw new HttpError(400, `the body is longer than its Content-Length of ${length} bytes`);
  }
  return { early, earlyBytes, handBack };
}

/**
 * Starts `envd-holder <mode> <bytes> <earlyBytes>` on the early bytes (its
 * stdin), the socket (fd 3) and `fd4` (a file descriptor, or 'pipe' for one
 * envd reads). `outcome` resolves with its one line once it has exited.
 */
export function startBodyReader(holder: string, mode: '--receive' | '--relay', bytes: number, taken: TakenBody, socket: Socket, fd4: number | 'pipe'): { child: ChildProcess; outcome: Promise<BodyOutcome> } {
  const child = spawn(holder, [mode, String(bytes), String(taken.earlyBytes)], { stdio: ['pipe', 'pipe', 'ignore', socket, fd4] });
  // EPIPE if it failed before reading them: its outcome line says why.
  child.stdin!.on('error', () => {});
  for (const chunk of taken.early) child.stdin!.write(chunk);
  child.stdin!.end();
  const outcome = new Promise<BodyOutcome>((resolve, reject) => {
    let line = '';
    child.stdout!.setEncoding('utf8').on('data', (text: string) => (line += text));
    child.once('error', (error) => reject(errnoToHttpError(error, 'upload receiver')));
    child.once('close', (code) => {
      const [kind, a, b] = line.trim().split(' ');
      if (kind === 'ok') resolve({ kind, bytes: Number(a), sha256: b });
      else if (kind === 'short' || kind === 'idle') resolve({ kind, bytes: Number(a) });
      else if (kind === 'error') resolve({ kind, errno: Number(a), bytes: Number(b) });
      else reject(new Error(`upload receiver exited with ${code} and said ${JSON.stringify(line)}`));
    });
  });
  return { child, outcome };
}

/** The answer for a body that did not arrive whole; undefined for one that did. */
export function outcomeError(outcome: BodyOutcome): unknown {
  if (outcome.kind === 'short') return new HttpError(400, 'upload aborted by the client');
  if (outcome.kind === 'idle') return new HttpError(408, 'upload stalled: no body bytes for 60 s');
  if (outcome.kind === 'error') {
    const code = ERRNO_CODES.get(outcome.errno);
    return errnoToHttpError(Object.assign(new Error(`upload receiver: ${code ?? outcome.errno}`), { code }), 'upload');
  }
  return undefined;
}
