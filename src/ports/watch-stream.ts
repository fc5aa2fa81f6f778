import { createSession } from 'better-sse';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { PortEntry, PortTable } from './port-table.js';

/** A comment line after this much silence keeps proxies from closing an idle watch. */
export const PORTS_KEEP_ALIVE_MS = 15_000;

/**
 * Events a client may leave unread. Port events are rare and small; a client
 * that stops reading for good while ports churn must not make envd hold them
 * all. Past this, the stream ends with an `error` event.
 */
export const PORTS_BACKLOG_BYTES = 256 * 1024;

/**
 * GET /ports/watch as an SSE stream: `ready` with every port open now, then
 * `open` and `close` as they happen. Subscribing starts the table's polling
 * (if nothing else keeps it on); the subscription ends exactly once, however
 * the stream does.
 */
export async function streamPorts(table: PortTable, req: IncomingMessage, res: ServerResponse, log: FastifyBaseLogger): Promise<void> {
  let unsubscribe: (() => void) | undefined;
  let closed = false;
  const stop = () => {
    if (closed) return;
    closed = true;
    unsubscribe?.();
    if (!res.writableEnded) res.end();
  };
  res.once('close', stop);
  if (res.destroyed || req.socket.destroyed) return stop();

  let session;
  try {
    // No `retry:` and no ids: a watch is not resumed; a new one's `ready` says what is open.
    session = await createSession(req, res, { keepAlive: PORTS_KEEP_ALIVE_MS, retry: null });
  } catch (error) {
    log.warn({ err: error }, 'could not start the ports stream');
    return stop();
  }
  session.once('disconnected', stop);
  if (closed) return;

  const send = (event: 'open' | 'close', entry: PortEntry) => {
    if (closed || table.isHidden(entry)) return;
    if (res.writableLength > PORTS_BACKLOG_BYTES) {
      push(res, 'error', { message: `the client left more than ${PORTS_BACKLOG_BYTES} bytes of port events unread; watch again` });
      return stop();
    }
    push(res, event, entry);
  };
  unsubscribe = table.subscribe({ onOpen: (entry) => send('open', entry), onClose: (entry) => send('close', entry) });
  push(res, 'ready', { ports: table.visible() });
}

/** One event: `event:` and one JSON `data:` line, no `id:` (as the file watch spells them). */
function push(res: ServerResponse, event: 'ready' | 'open' | 'close' | 'error', data: unknown): void {
  res.write(`event:${event}\ndata:${JSON.stringify(data)}\n\n`);
}
