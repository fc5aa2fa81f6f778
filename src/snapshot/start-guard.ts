import type { FastifyRequest } from 'fastify';
import { conflict } from '../errors.js';
import type { SnapshotControl } from './snapshot-control.js';

/**
 * The routes that start a command (its cgroup would be born inside the frozen parent), or run one in a
 * session's frozen shell (it would wait, silent, until its timeout); a service's start is one too.
 */
const STARTS = new Set(['POST /commands', 'POST /commands/stream', 'POST /sessions', 'POST /sessions/:id/commands', 'POST /sessions/:id/commands/stream', 'PUT /services/:name', 'POST /services/:name/start', 'POST /services/:name/restart']);

/**
 * A preHandler for the whole app: while prepare holds the commands frozen, a
 * new command would be born frozen in its cgroup and its start would time
 * out (a 500 after seconds). It is refused at once with a 409 that says what
 * to do. Everything else goes on: stdin waits in its pipe, signals and
 * DELETE (cgroup.kill) reach frozen processes.
 */
export function refuseStartsWhileFrozen(snapshot: SnapshotControl): (request: FastifyRequest) => Promise<void> {
  return async (request) => {
    if (!snapshot.commandsFrozen || !STARTS.has(`${request.method} ${request.routeOptions.url}`)) return;
    throw conflict('the commands are frozen for a snapshot (POST /snapshot/prepare): POST /init or POST /snapshot/thaw thaws them');
  };
}
