import { Type } from '@sinclair/typebox';

/** The body of every error answer, for the response schemas (and so the OpenAPI document). */
export const ErrorSchema = Type.Object({ message: Type.String({ description: 'What went wrong, naming the field or path' }) }, { title: 'Error', description: 'Every error answer' });

/**
 * The one error type route handlers throw; the error handler turns it into
 * `{ message }`, with `headers` (e.g. a 416's Content-Range) on the answer.
 */
export class HttpError extends Error {
  readonly headers: Record<string, string>;
  /** Fields the answer carries beside `message` (a 409 of GET /commands/{pid}/ready: the exit's fields). */
  readonly fields: Record<string, unknown>;

  constructor(
    readonly status: number,
    message: string,
    options?: { cause?: unknown; headers?: Record<string, string>; fields?: Record<string, unknown> },
  ) {
    super(message, options);
    this.name = 'HttpError';
    this.headers = options?.headers ?? {};
    this.fields = options?.fields ?? {};
  }
}

export const badRequest = (message: string) => new HttpError(400, message);
export const notFound = (message: string) => new HttpError(404, message);
export const conflict = (message: string) => new HttpError(409, message);

const ERRNO_STATUS: Record<string, { status: number; text: string }> = {
  ENOENT: { status: 404, text: 'no such file or directory' },
  ENOTDIR: { status: 400, text: 'a component of the path is not a directory' },
  EISDIR: { status: 400, text: 'is a directory' },
  EEXIST: { status: 409, text: 'already exists' },
  ENOTEMPTY: { status: 409, text: 'directory is not empty' },
  ENOSPC: { status: 507, text: 'no space left on device' },
  EDQUOT: { status: 507, text: 'disk quota exceeded' },
  EACCES: { status: 403, text: 'permission denied' },
  EPERM: { status: 403, text: 'operation not permitted' },
  EROFS: { status: 403, text: 'read-only file system' },
  ENAMETOOLONG: { status: 400, text: 'file name too long' },
  ELOOP: { status: 400, text: 'too many levels of symbolic links' },
  EINVAL: { status: 400, text: 'invalid argument' },
  EXDEV: { status: 400, text: 'cannot move across file systems' },
  // Opening a Unix socket, or a device without a driver: there are no bytes to read.
  ENXIO: { status: 400, text: 'no such device or address (a socket, or a device without a driver)' },
  // A file the kernel refuses to read as bytes (/proc/self/mem, a write-only proc file): the request's, not envd's.
  EIO: { status: 400, text: 'cannot be read' },
  EMFILE: { status: 503, text: 'too many open files in envd; retry shortly' },
  ENFILE: { status: 503, text: 'too many open files in the system; retry shortly' },
  EAGAIN: { status: 503, text: 'resource temporarily unavailable (process or memory limit); retry shortly' },
};

/**
 * Maps a failed system call to an HTTP error, in this one place. Unknown
 * errnos are rethrown untouched so that the error handler reports a 500.
 */
export function errnoToHttpError(error: unknown, path?: string): unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const known = code ? ERRNO_STATUS[code] : undefined;
  if (!known) return error;
  const subject = path ? `${path}: ` : '';
  return new HttpError(known.status, `${subject}${known.text} (${code})`, { cause: error });
}

/**
 * An error from a system call (it has `syscall` and a known `code`) as its
 * HTTP error, for the error handler: a route that forgot to map one still
 * answers EPERM with 403, not 500. Undefined for anything else.
 */
export function errnoFailure(error: unknown): HttpError | undefined {
  const failure = error as NodeJS.ErrnoException | undefined;
  if (typeof failure?.syscall !== 'string') return undefined;
  const mapped = errnoToHttpError(error, failure.path);
  return mapped instanceof HttpError ? mapped : undefined;
}
