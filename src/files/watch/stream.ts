import { createSession } from 'better-sse';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { HttpError, errnoToHttpError } from '../../errors.js';
import type { Owner } from '../paths.js';
import { openDirectory } from '../user-path.js';
import { describeWatchEnd, describeWatchError } from './describe-error.js';
import type { WatchRegistry } from './registry.js';
import type { ChangeType } from './replay.js';
import type { WatchSubscriber } from './watched-directory.js';

/** A comment line after this much silence keeps proxies from closing an idle watch. */
export const WATCH_KEEP_ALIVE_MS = 15_000;

/**
 * Events a client may leave unread before its watch ends: a client that
 * stopped reading while a build rewrites its tree must not make envd buffer
 * every event for it. Past this, the stream ends with an `error` event.
 */
export const WATCH_BACKLOG_BYTES = 1024 * 1024;

/** One client's watch: what the registry tells it, passed on to its stream once that is open. */
class ClientWatch implements WatchSubscriber {
  /** Set while the stream is open. */
  send: ((type: ChangeType, path: string) => void) | undefined;
  end: ((error: unknown) => void) | undefined;
  /** Why the watch ended before its stream was open to say so. */
  failure: unknown;

  constructor(readonly recursive: boolean) {}

  onChange(type: ChangeType, path: string): void {
    this.send?.(type, path);
  }

  onEnd(error: unknown): void {
    if (this.end) this.end(error);
    else this.failure ??= error;
  }
}

export interface ArmedWatch {
  path: string;
  client: ClientWatch;
  release(): void;
}

/**
 * Subscribes a client to `path` and resolves once every directory it covers
 * is watched (every change after that is seen), or rejects with a clear
 * error, nothing held. Checks run before anything is armed, so a missing path
 * is a 404.
 */
export async function armWatch(registry: WatchRegistry, path: string, recursive: boolean, owner?: Owner): Promise<ArmedWatch> {
  // Reached by user-path.ts's walk: a symlink on the way is followed only where root or `owner` alone could have put it.
  const { dir } = await openDirectory(path, { owner });
  let stats;
  try {
    stats = await dir.stats();
  } catch (error) {
    await dir.close();
    throw errnoToHttpError(error, path);
  }
  const client = new ClientWatch(recursive);
  let subscription;
  try {
    subscription = registry.subscribe(path, dir.detach(), stats.ino, client);
  } catch (error) {
    throw describeWatchError(error, path);
  }
  try {
    await subscription.ready;
    if (client.failure !== undefined) throw client.failure;
  } catch (error) {
    subscription.release();
    throw describeWatchError(error, path);
  }
  return { path, client, release: subscription.release };
}

/**
 * Takes over the response as an SSE stream: `ready`, then one `change` per
 * event. The client watch is released exactly once, whichever comes first:
 * the client disconnecting, the response closing, or the watch ending
 * (reported as an `error` event before the stream ends).
 */
export async function streamWatch(armed: ArmedWatch, req: IncomingMessage, res: ServerResponse, log: FastifyBaseLogger): Promise<void> {
  const { path, client } = armed;
  let closed = false;
  const stop = () => {
    if (closed) return;
    closed = true;
    client.send = undefined;
    client.end = undefined;
    armed.release();
    if (!res.writableEnded) res.end();
  };
  // Registered before the session exists: a client that left while the watch was arming still releases it.
  res.once('close', stop);
  if (res.destroyed || req.socket.destroyed) return stop();

  let session;
  try {
    // No `retry:` hint and (below) no ids: a watch cannot be resumed, so a client has nothing to send back.
    session = await createSession(req, res, { keepAlive: WATCH_KEEP_ALIVE_MS, retry: null });
  } catch (error) {
    log.warn({ err: error, path }, 'could not start the watch stream');
    return stop();
  }
  session.once('disconnected', stop);
  if (closed) return;
  const end = (error: unknown) => {
    if (error instanceof HttpError && error.status < 500) log.info({ path }, error.message);
    else log.warn({ err: error, path }, 'watch failed');
    if (session.isConnected) push(res, 'error', { message: describeWatchEnd(error, path) });
    stop();
  };
  push(res, 'ready', { path });
  // Ended between arming and now (the directory went away): say so at once.
  if (client.failure !== undefined) return end(client.failure);
  client.end = end;
  client.send = (type, changed) => {
    if (!session.isConnected) return;
    if (res.writableLength > WATCH_BACKLOG_BYTES) {
      return end(new HttpError(503, `${path}: the client left more than ${WATCH_BACKLOG_BYTES} bytes of events unread; watch again`));
    }
    push(res, 'change', { type, path: changed });
  };
}

/**
 * One event: `event:` and one JSON `data:` line, no `id:`, spelled as better-sse spells its own (no space after the colon). better-sse's push would add a random id,
 * which an EventSource-like client sends back as Last-Event-ID for nothing (docs/api.md, "Events").
 */
function push(res: ServerResponse, event: 'ready' | 'change' | 'error', data: unknown): void {
  res.write(`event:${event}\ndata:${JSON.stringify(data)}\n\n`);
}
