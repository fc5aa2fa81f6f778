import { createSession } from 'better-sse';
import { watch, type FSWatcher } from 'chokidar';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { HttpError, badRequest, errnoToHttpError } from '../errors.js';

/** A comment line after this much silence keeps proxies from closing an idle watch. */
export const WATCH_KEEP_ALIVE_MS = 15_000;

export type ChangeType = 'create' | 'modify' | 'delete';

const CHANGE_TYPES: Record<string, ChangeType> = {
  add: 'create',
  addDir: 'create',
  change: 'modify',
  unlink: 'delete',
  unlinkDir: 'delete',
};

/**
 * inotify limits surface as ENOSPC (max_user_watches) or EMFILE
 * (max_user_instances). Neither means a full disk or envd's own fd table, so
 * they get their own message instead of the generic errno mapping.
 */
function describeWatchError(error: unknown, path: string): HttpError | unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'ENOSPC' || code === 'EMFILE') {
    return new HttpError(503, `${path}: inotify watch limit reached: raise fs.inotify.max_user_watches / max_user_instances (${code})`, { cause: error });
  }
  return errnoToHttpError(error, path);
}

/**
 * Arms a chokidar watch on a directory and resolves once it is ready (every
 * change after that is seen), or rejects with a clear error, the watcher
 * closed. Checks run before anything is armed, so a missing path is a 404.
 */
export async function armWatch(path: string, recursive: boolean): Promise<FSWatcher> {
  const stats = await stat(path).catch((error) => {
    throw errnoToHttpError(error, path);
  });
  if (!stats.isDirectory()) throw badRequest(`${path}: not a directory`);
  const watcher = watch(path, {
    ignoreInitial: true,
    // 0: the directory's own entries only; undefined: the whole tree.
    depth: recursive ? undefined : 0,
    usePolling: false,
    // atomic would hold deletes back 100 ms and fold delete+create into "modify": report what happened, when it happened.
    atomic: false,
    awaitWriteFinish: false,
    // A symlink to / inside a watched tree must not make envd watch the whole file system.
    followSymlinks: false,
  });
  try {
    await new Promise<void>((resolve, reject) => {
      watcher.once('ready', resolve);
      watcher.once('error', reject);
    });
  } catch (error) {
    await watcher.close();
    throw describeWatchError(error, path);
  }
  return watcher;
}

/**
 * Takes over the response as an SSE stream: `ready`, then one `change` per
 * event. The watcher is closed exactly once, whichever comes first: the client
 * disconnecting, the response closing, or a watcher error (reported as an
 * `error` event before the stream ends).
 */
export async function streamWatch(watcher: FSWatcher, path: string, req: IncomingMessage, res: ServerResponse, log: FastifyBaseLogger): Promise<void> {
  let closed = false;
  const stop = () => {
    if (closed) return;
    closed = true;
    watcher.removeAllListeners();
    watcher.close().catch((error: unknown) => log.warn({ err: error, path }, 'closing a watcher failed'));
    if (!res.writableEnded) res.end();
  };
  // Registered before the session exists: a client that left while the watch was arming still releases it.
  res.once('close', stop);
  if (res.destroyed || req.socket.destroyed) return stop();

  let session;
  try {
    session = await createSession(req, res, { keepAlive: WATCH_KEEP_ALIVE_MS });
  } catch (error) {
    log.warn({ err: error, path }, 'could not start the watch stream');
    return stop();
  }
  session.once('disconnected', stop);
  if (closed) return;
  session.push({ path }, 'ready');
  watcher.on('all', (event, changed) => {
    const type = CHANGE_TYPES[event];
    if (type && session.isConnected) session.push({ type, path: changed }, 'change');
  });
  watcher.on('error', (error) => {
    const described = describeWatchError(error, path);
    const message = described instanceof HttpError ? described.message : 'the watch failed';
    log.warn({ err: error, path }, 'watch failed');
    if (session.isConnected) session.push({ message }, 'error');
    stop();
  });
}
