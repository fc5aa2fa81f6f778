import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { Transform } from 'node:stream';
import { HttpError, badRequest } from '../errors.js';
import { fillAtomically, fillTemp, writeSource } from './atomic-write.js';
import { sha256OfFile } from './checksum.js';
import { spliceableLength } from './body-takeover.js';
import { spliceBody } from './upload-splice.js';
import type { Owner } from './paths.js';

/** Raw uploads above this are refused with 413 and nothing is written. */
export const UPLOAD_LIMIT = 500 * 1024 * 1024;

const tooLarge = () => new HttpError(413, `upload is larger than the limit of ${UPLOAD_LIMIT} bytes (500 MiB)`);

/**
 * Runs before the body is parsed: a wrong content type or a declared length
 * over the limit is refused without reading a byte of the body.
 */
export function checkUploadHeaders(headers: IncomingHttpHeaders): void {
  const type = headers['content-type']?.split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/octet-stream') {
    throw badRequest(`content-type must be application/octet-stream, got ${JSON.stringify(headers['content-type'] ?? '(none)')}`);
  }
  const declared = headers['content-length'];
  if (declared !== undefined && Number(declared) > UPLOAD_LIMIT) throw tooLarge();
}

/**
 * An upload body that sends nothing for this long is answered 408 and its
 * temporary file removed: the client is gone or stuck, and the request would
 * otherwise hold its connection and file forever. The holder's receive mode
 * (large bodies) keeps the same limit (RECEIVE_IDLE_MS in src/holder/receive.c).
 */
export const UPLOAD_IDLE_MS = 60_000;

/** Passes bytes through, failing with 413 the moment more than `limit` have gone by (chunked bodies declare no length). */
export function limitBytes(limit: number): Transform {
  let seen = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      if (seen > limit) done(tooLarge());
      else done(null, chunk);
    },
  });
}

/**
 * The body's chunks, failing with 408 when none arrives for `idleMs` (from
 * the start, and again after each chunk). The wait itself must end: a
 * pipeline whose source still waits for a chunk never settles, whatever
 * happened to the streams after it.
 */
export async function* untilStalled(body: AsyncIterator<Buffer>, idleMs: number): AsyncGenerator<Buffer> {
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new HttpError(408, `upload stalled: no body bytes for ${idleMs / 1000} s`)), idleMs);
    });
    try {
      const next = await Promise.race([body.next(), stalled]);
      if (next.done) return;
      yield next.value;
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Streams the request body into a temporary file and renames it over the
 * target, answering the sha256 of the temporary file's bytes. The body is read through `iterator({ destroyOnReturn: false })`:
 * when the write fails (413, 507) the request is left open, so the error
 * can still be answered; the rest of the body is then drained by Node and the
 * connection closed (the caller sets `connection: close`).
 *
 * Large bodies with a Content-Length are spliced by `receiver` instead
 * (upload-splice.ts); then `spliced` is true and the caller must close the
 * connection after its answer: Node's parser never saw the body's end.
 */
export async function receiveUpload(request: IncomingMessage, target: string, owner: Owner | undefined, receiver?: string, idleMs = UPLOAD_IDLE_MS): Promise<{ path: string; size: number; sha256: string; spliced: boolean }> {
  const spliceable = receiver === undefined ? undefined : spliceableLength(request);
  try {
    if (spliceable !== undefined) {
      // A large body with a Content-Length (checked against the limit before the body was read): the kernel
      // moves it, and envd hashes the temporary file as it grows, from the page cache, meanwhile.
      let sha256 = '';
      const written = await fillAtomically(target, owner, (mode, dir) =>
        fillTemp(
          target,
          owner,
          mode,
          async (handle, readPath) => {
            const spliced = spliceBody(request, handle, spliceable, receiver!);
            // Both settled before anything else happens to the file: a failed splice's temp file is removed
            // (and its disk unmountable) only once the hash has closed it too; the splice's error is the answer.
            const [splice, hash] = await Promise.allSettled([spliced, sha256OfFile(readPath, spliced)]);
            if (splice.status === 'rejected') throw splice.reason;
            if (hash.status === 'rejected') throw hash.reason;
            sha256 = hash.value;
          },
          dir,
        ),
      );
      return { ...written, sha256, spliced: true };
    }
    // Small or chunked bodies: hashed from the page cache once written (the temporary file through its
    // own descriptor, before it is renamed: never by a name a user could swap).
    let sha256 = '';
    const written = await fillAtomically(target, owner, (mode, dir) =>
      fillTemp(
        target,
        owner,
        mode,
        async (handle, readPath) => {
          await writeSource(untilStalled(request.iterator({ destroyOnReturn: false }), idleMs), limitBytes(UPLOAD_LIMIT))(handle);
          sha256 = await sha256OfFile(readPath);
        },
        dir,
      ),
    );
    return { ...written, sha256, spliced: false };
  } catch (error) {
    // The client went away mid-body: nobody reads this answer, and it is not envd's fault (no 500 in the logs).
    if (request.destroyed && !request.complete) throw new HttpError(400, 'upload aborted by the client', { cause: error });
    throw error;
  }
}
