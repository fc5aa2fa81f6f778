import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ServerResponse } from 'node:http';
import { ErrorSchema, HttpError, notFound } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ProcessRegistry } from './registry.js';
import { readinessOf, type Readiness, type ReadyOutcome } from './readiness.js';
import { Type } from '@sinclair/typebox';
import { ReadyAnswer, ReadyQuery } from './ready-schemas.js';
import { ExitInfo, PidParams } from './schemas.js';

/** 409: the command ended before it was ready, and how. */
const EndedBeforeReady = Type.Object(
  { message: Type.String(), ...ExitInfo.properties },
  { title: 'EndedBeforeReady', description: "The command ended before it was ready: the message and the exit's fields" },
);

/**
 * GET /commands/{pid}/ready: a long-poll on a command's readiness (issue 39).
 * 200 once ready, 408 while not past `timeout_ms`, 409 with the exit's fields
 * if it ended first, 404 for a pid envd does not track. A command started
 * without `ready` counts as ready from its start (`after_ms` 0).
 */
export const readyRoutes: FastifyPluginAsyncTypebox<{ processes: ProcessRegistry; logger: Logger }> = async (app, { processes, logger }) => {
  app.get(
    '/:pid/ready',
    {
      schema: {
        summary: 'Wait until a command is ready (its `ready` check passed): 408 past timeout_ms, 409 with the exit if it ended first',
        params: PidParams,
        querystring: ReadyQuery,
        response: { 200: ReadyAnswer, 409: EndedBeforeReady, '4xx': ErrorSchema, '5xx': ErrorSchema },
      },
    },
    async (request, reply) => {
      const proc = processes.get(Number(request.params.pid));
      if (!proc) throw notFound(`pid ${request.params.pid} is not tracked`);
      const readiness = readinessOf(proc, logger);
      if (!readiness) return { after_ms: 0 };
      const timeout = request.query.timeout_ms;
      const outcome = await parkUntilReady(readiness, reply.raw, timeout);
      if (outcome === 'gone') return reply;
      if (outcome === 'expired') throw new HttpError(408, `pid ${proc.pid} is not ready after ${timeout} ms; ask again`);
      if (outcome.ready) return { after_ms: outcome.afterMs };
      throw new HttpError(409, `pid ${proc.pid} ended before it was ready`, { fields: { ...outcome.exit } });
    },
  );
};

/** Resolves once settled, when the client hangs up, or past `timeoutMs`; an abandoned poll holds nothing. */
function parkUntilReady(readiness: Readiness, res: ServerResponse, timeoutMs: number | undefined): Promise<ReadyOutcome | 'gone' | 'expired'> {
  if (readiness.current) return Promise.resolve(readiness.current);
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const done = (outcome: ReadyOutcome | 'gone' | 'expired') => {
      forget();
      res.off('close', onClose);
      clearTimeout(timer);
      resolve(outcome);
    };
    const onClose = () => done('gone');
    const forget = readiness.whenSettled(done);
    res.once('close', onClose);
    if (timeoutMs !== undefined) timer = setTimeout(() => done('expired'), timeoutMs);
  });
}
