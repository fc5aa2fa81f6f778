import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { badRequest, ErrorSchema, HttpError } from '../errors.js';
import { type MemoryBudget, RESERVE_BYTES } from '../memory-budget.js';
import type { SessionRegistry } from './registry.js';
import { ListSessionsQuery, CreateSessionBody, type CreateSessionBody as CreateSessionRequest, SessionCommandBody, SessionCommandResult, SessionCreated, SessionEnded, SessionList, SessionParams, SessionStreamBody } from './schemas.js';
import type { Session } from './session.js';
import { EventSink, ResultSink } from './sinks.js';

export interface SessionRoutesOptions {
  sessions: SessionRegistry;
  /** A command's JSON result takes its bytes from the `transfers` part (sinks.ts). */
  memoryBudget?: MemoryBudget;
}

const errors = { '4xx': ErrorSchema, '5xx': ErrorSchema };
const EventStream = {
  description: 'Server-sent events, as /commands/stream: start { pid }, stdout/stderr { stream, data }, exit { exit_code, timed_out?, session_ended? }',
  content: { 'text/event-stream': { schema: Type.String() } },
};
const timeoutMs = (seconds: number | undefined) => Math.ceil((seconds ?? 0) * 1000);

export const sessionRoutes: FastifyPluginAsyncTypebox<SessionRoutesOptions> = async (app, { sessions, memoryBudget }) => {
  app.post(
    '',
    { schema: { summary: 'Start a shell whose state carries from one command to the next', body: CreateSessionBody, response: { 201: SessionCreated, ...errors } } },
    async (request, reply) => {
      // The schema allows only the two shell names; the type provider cannot see through Unsafe.
      const session = await sessions.create(request.body as CreateSessionRequest);
      request.log.info({ session: session.id, pid: session.pid }, 'session started');
      return reply.code(201).send({ id: session.id, pid: session.pid, user: session.user.name, cwd: session.cwd() ?? '/', shell: session.shell });
    },
  );

  app.get('', { schema: { summary: 'List the live sessions', querystring: ListSessionsQuery, response: { 200: SessionList, ...errors } } }, async () => ({
    sessions: sessions.list().map((session) => ({
      id: session.id,
      pid: session.pid,
      user: session.user.name,
      cwd: session.cwd() ?? '/',
      shell: session.shell,
      busy: session.busy,
      started_at: session.startedAt.toISOString(),
      last_used_at: session.lastUsedAt.toISOString(),
    })),
  }));

  app.post(
    '/:id/commands',
    {
      schema: {
        summary: "Run a command in a session's shell and answer its result alone (409 while another runs, 410 once the session has ended)",
        params: SessionParams,
        body: SessionCommandBody,
        response: { 200: SessionCommandResult, ...errors },
      },
    },
    async (request, reply) => {
      const session = sessions.get(request.params.id);
      rejectNul(request.body.cmd);
      const sink = new ResultSink(memoryBudget);
      try {
        const exit = await runOwned(session, reply.raw, () => session.run(request.body.cmd, { timeoutMs: timeoutMs(request.body.timeout), stdin: request.body.stdin }, sink));
        sessions.touched(session);
        return sink.result(exit);
      } finally {
        sink.release();
      }
    },
  );

  app.post(
    '/:id/commands/stream',
    {
      config: { memory: { part: 'streams', bytes: RESERVE_BYTES.stream } },
      schema: { summary: "Run a command in a session's shell and stream its output as server-sent events", params: SessionParams, body: SessionStreamBody, response: { 200: EventStream, ...errors } },
    },
    async (request, reply) => {
      const session = sessions.get(request.params.id);
      // Refused (400, 409, 410) as JSON before the stream starts.
      rejectNul(request.body.cmd);
      session.checkUsable();
      const sink = await EventSink.open(request, reply, session, request.body.encoding === 'base64');
      try {
        const exit = await runOwned(session, reply.raw, () => session.run(request.body.cmd, { timeoutMs: timeoutMs(request.body.timeout), stdin: request.body.stdin }, sink));
        sink.finish(exit);
      } catch (error) {
        sink.fail(error instanceof HttpError ? error.message : 'the session command failed');
      }
      sessions.touched(session);
    },
  );

  app.delete(
    '/:id',
    { schema: { summary: 'End a session: its shell and jobs get SIGHUP (SIGKILL 2 s later); nohup and setsid jobs live on', params: SessionParams, response: { 200: SessionEnded, ...errors } } },
    async (request) => {
      await sessions.end(sessions.get(request.params.id));
      request.log.info({ session: request.params.id }, 'session ended on request');
      return { ended: true as const };
    },
  );
};

/** The shell reads a command as one line of text: a NUL byte cannot reach it intact. */
function rejectNul(cmd: string): void {
  if (cmd.includes('\0')) throw badRequest('body/cmd must not contain a NUL byte');
}

/** A session command belongs to its request: a client gone before the end interrupts it (the session lives on). */
async function runOwned<T>(session: Session, res: NodeJS.EventEmitter & { writableFinished: boolean }, run: () => Promise<T>): Promise<T> {
  const onClose = () => {
    if (!res.writableFinished) session.abandon();
  };
  res.once('close', onClose);
  try {
    return await run();
  } finally {
    res.off('close', onClose);
  }
}
