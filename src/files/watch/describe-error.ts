import { HttpError, errnoToHttpError, notFound } from '../../errors.js';

/**
 * inotify limits surface as ENOSPC (max_user_watches) or EMFILE
 * (max_user_instances). Neither means a full disk or envd's own fd table, so
 * they get their own message instead of the generic errno mapping. Anything
 * unknown is returned as it is, for the error handler's 500.
 */
export function describeWatchError(error: unknown, path: string): HttpError | unknown {
  if (error instanceof HttpError) return error;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EMFILE') {
    return new HttpError(503, `${path}: inotify watch limit reached: raise fs.inotify.max_user_watches / max_user_instances (${code})`, { cause: error });
  }
  return errnoToHttpError(error, path);
}

/** The message of a watch's last `error` event: internals stay in the log, like a 500's. */
export function describeWatchEnd(error: unknown, path: string): string {
  const described = describeWatchError(error, path);
  return described instanceof HttpError ? described.message : `${path}: the watch failed`;
}

/** Why a watch ends when its own directory goes. */
export const directoryGone = (path: string) => notFound(`${path}: the watched directory was deleted or moved away`);
