import { type Static, Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply } from 'fastify';
import { Readable } from 'node:stream';
import type { Config } from '../config.js';
import { conflict, ErrorSchema, HttpError, notFound } from '../errors.js';
import type { SandboxState } from '../sandbox-state.js';
import type { ProcessRegistry } from './registry.js';
import {
  AttachQuery,
  BackgroundStarted,
  ListQuery,
  OutputQuery,
  RawBytes,
  WaitQuery,
  CommandResult,
  CommandStats,
  type CommandResult as CommandResultValue,
  Empty,
  Killed,
  PidParams,
  ProcessList,
  ResizeBody,
  SignalBody,
  type SignalName,
  StartBody,
  MAX_STDIN_BYTES,
  StdinBody,
  StreamBody,
} from './schemas.js';
import { keptOutput, type OutputQuery as OutputQueryValue } from './output.js';
import { parkUntilFinished } from './long-poll.js';
import { commandResult } from './result.js';
import { resumeCursor } from './resume.js';
import { prepareCommand } from './spawn.js';
import { markStart, traceCommandStart } from './start-trace.js';
import { streamProcess } from './sse.js';
import { checkReadyCheck } from './ready-probes.js';
import { watchReadiness } from './readiness.js';
import { stdinBytes, StdinBytes } from './stdin.js';
import type { TrackedProcess } from './tracked-process.js';
import { RESERVE_BYTES } from '../memory-budget.js';

export interface CommandRoutesOptions {
  config: Config;
  state: SandboxState;
  processes: ProcessRegistry;
}

const errors = { '4xx': ErrorSchema, '5xx': ErrorSchema };

const EventStream = {
  description: 'Server-sent events: start { pid }, stdout/stderr { stream, data }, exit { exit_code, timed_out?, signal? }',
  content: { 'text/event-stream': { schema: Type.String() } },
};

/** The answer `wait` gives for a pid envd does not track (the public contract's shape). */
const NOT_FOUND_RESULT = { stdout: '', stderr: 'process not found', exit_code: 1, reason: 'exited' as const };

/** How long DELETE /commands/{pid} waits for a killed command's exit to reach its followers before forgetting it regardless. */
const KILLED_EXIT_WAIT_MS = 2_000;

const timeoutMs = (seconds: number | undefined) => Math.ceil((seconds ?? 0) * 1000);

export const commandRoutes: FastifyPluginAsyncTypebox<CommandRoutesOptions> = async (app, { config, state, processes }) => {
  const tracked = (pid: string): TrackedProcess => {
    const proc = processes.get(Number(pid));
    if (!proc) throw notFound(`pid ${pid} is not tracked`);
    return proc;
  };

  // '' (not '/'): the route is exactly /commands, as the contract and the OpenAPI document name it.
  app.post(
    '',
    {
      schema: {
        summary: 'Run a command (foreground result, or { pid } with background: true)',
        body: StartBody,
        response: { 200: Type.Union([CommandResult, BackgroundStarted]), ...errors },
      },
    },
    async (request, reply) => {
      const { background = false, timeout, ready, ready_timeout_ms: readyTimeoutMs } = request.body;
      checkReadyCheck(ready, readyTimeoutMs);
      traceCommandStart(request.raw, reply.raw);
      const prepared = await prepareCommand(request.body, state);
      markStart('prepared');
      const proc = await processes.start(prepared, { background, timeoutMs: timeoutMs(timeout) });
      markStart('linked');
      if (ready) watchReadiness(proc, ready, { timeoutMs: readyTimeoutMs, logger: processes.log });
      if (background) return { pid: proc.pid };

      // A foreground command belongs to its request: no client, no command.
      const onClose = () => {
        if (!proc.running || reply.raw.writableFinished) return;
        request.log.info({ pid: proc.pid }, 'client went away before the command finished: killing it');
        proc.kill();
      };
      reply.raw.once('close', onClose);
      try {
        await proc.finished;
        markStart('exit-seen');
      } finally {
        reply.raw.off('close', onClose);
      }
      return sendResult(reply, proc, () => processes.collect(proc));
    },
  );

  app.post(
    '/stream',
    { config: { memory: { part: 'streams', bytes: RESERVE_BYTES.stream } }, schema: { summary: 'Run a command and stream its output as server-sent events', body: StreamBody, response: { 200: EventStream, ...errors } } },
    async (request, reply) => {
      // Everything that can fail with a JSON error happens before the stream starts.
      const { ready, ready_timeout_ms: readyTimeoutMs } = request.body;
      checkReadyCheck(ready, readyTimeoutMs);
      const prepared = await prepareCommand(request.body, state);
      const proc = await processes.start(prepared, { background: false, timeoutMs: timeoutMs(request.body.timeout), streamed: true });
      // Its stream gets a `ready` event once the command is.
      const readiness = ready && watchReadiness(proc, ready, { timeoutMs: readyTimeoutMs, guardStream: true, logger: processes.log });
      const onStarted = readiness ? (write: (event: string, data: unknown) => void) => void readiness.whenSettled((outcome) => outcome.ready && write('ready', { after_ms: outcome.afterMs })) : undefined;
      // The stream owns the command: collected once its `exit` event went out whole. A stream its client cut
      // leaves the command uncollected (killed, kept for --keep-finished), so that the client can resume it.
      const delivered = new Promise<boolean>((resolve) => reply.raw.once('close', () => resolve(reply.raw.writableFinished)));
      // Whole is "handed to the kernel": the client's reconnect may still resume it for a while (STREAM_RESUME_MS).
      void Promise.all([proc.finished, delivered]).then(([, whole]) => whole && processes.collect(proc, true));
      await streamProcess(request, reply, proc, { killOnDisconnect: true, lendSocket: config.directOutput, bytes: request.body.encoding === 'base64', onStarted });
    },
  );

  app.get(
    '',
    {
      schema: {
        summary: 'List tracked processes: running ones and finished ones not yet collected; with finished=true every finished one kept',
        querystring: ListQuery,
        response: { 200: ProcessList, ...errors },
      },
    },
    async (request) => ({
      processes: processes.list().filter((proc) => request.query.finished || proc.running || !proc.collected).map((proc) => ({
        pid: proc.pid,
        cmd: proc.meta.cmd,
        ...(proc.meta.args ? { args: proc.meta.args } : {}),
        cwd: proc.meta.cwd,
        user: proc.meta.user,
        background: proc.meta.background,
        stdin: proc.meta.stdin,
        started_at: proc.startedAt.toISOString(),
        running: proc.running,
        ...(proc.exit ? { exit_code: proc.exit.exit_code, reason: proc.exit.reason } : {}),
        ...(proc.endedAt && !proc.running ? { ended_at: proc.endedAt.toISOString() } : {}),
        ...(proc.ptySize ? { pty: proc.ptySize } : {}),
        ...(proc.meta.limits ? { limits: proc.meta.limits } : {}),
        ...(proc.running && proc.cgroup ? { stats: processes.stats(proc) } : {}),
      })),
    }),
  );

  app.get(
    '/:pid/stats',
    {
      schema: {
        summary: "What a command's cgroup uses: CPU time, memory now and at its peak, processes (409 without cgroups)",
        params: PidParams,
        response: { 200: CommandStats, ...errors },
      },
    },
    async (request) => {
      const proc = tracked(request.params.pid);
      const refused = processes.limitsRefused();
      if (refused !== undefined) throw conflict(`stats: ${refused}`);
      const stats = processes.stats(proc);
      if (!stats) throw conflict(`pid ${proc.pid} was started before envd ran commands in cgroups`);
      return stats;
    },
  );

  app.get(
    '/:pid/stream',
    {
      config: { memory: { part: 'streams', bytes: RESERVE_BYTES.stream } },
      schema: {
        summary: 'Attach: replay the kept output (from Last-Event-ID or ?from= when resuming), then follow live output until exit',
        params: PidParams,
        querystring: AttachQuery,
        response: { 200: EventStream, ...errors },
      },
    },
    async (request, reply) => {
      // A resume by id also finds a command its stream collected moments ago: the `exit` may not have reached the client.
      const resuming = Boolean(request.query.from || request.headers['last-event-id']);
      const proc = (resuming ? processes.resumable(Number(request.params.pid)) : undefined) ?? tracked(request.params.pid);
      const from = await resumeCursor(proc, request.query.from, request.headers['last-event-id']);
      // A collection meanwhile (a wait) forgets the command only once this replay is over: its log must stay.
      reply.raw.once('close', processes.answering(proc));
      // An attacher only watches: its leaving never kills the command.
      await streamProcess(request, reply, proc, { killOnDisconnect: false, lendSocket: config.directOutput, from, bytes: request.query.encoding === 'base64' });
    },
  );

  app.get(
    '/:pid/output',
    {
      schema: {
        summary: "A command's kept output of one stream as plain bytes (from/limit, or a Range header)",
        params: PidParams,
        querystring: OutputQuery,
        produces: ['application/octet-stream'],
        response: { 200: RawBytes, 206: RawBytes, ...errors },
      },
    },
    async (request, reply) => {
      // The schema allows only the two names; the type provider cannot see through Unsafe.
      const query = request.query as OutputQueryValue;
      const proc = tracked(request.params.pid);
      reply.raw.once('close', processes.answering(proc));
      const answer = await keptOutput(proc, query, request.headers.range);
      return reply.code(answer.status).headers(answer.headers).send(answer.body);
    },
  );

  app.get(
    '/:pid/wait',
    {
      schema: {
        summary: 'Wait for a process to end and get its result, then forget it (408 past timeout_ms while it runs; process not found once collected)',
        params: PidParams,
        querystring: WaitQuery,
        response: { 200: CommandResult, ...errors },
      },
    },
    async (request, reply) => {
      const pid = Number(request.params.pid);
      const proc = processes.get(pid);
      if (!proc) return NOT_FOUND_RESULT;
      // Until this answer is out (or its client gone), a collection by another waiter leaves the command for it.
      reply.raw.once('close', processes.answering(proc));
      const { timeout_ms: timeout } = request.query;
      const outcome = await parkUntilFinished(proc, reply.raw, timeout);
      // Nobody is left to answer: the request lets go of everything now, the command runs on uncollected.
      if (outcome === 'gone') return reply;
      if (outcome === 'expired') throw new HttpError(408, `pid ${proc.pid} is still running after ${timeout} ms; wait again`);
      return sendResult(reply, proc, () => processes.collect(proc));
    },
  );

  // Raw stdin: the body's bytes as they are (the JSON form needs base64 for them).
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer', bodyLimit: MAX_STDIN_BYTES }, (_request, body, done) => done(null, body));
  app.post(
    '/:pid/stdin',
    {
      bodyLimit: MAX_STDIN_BYTES,
      schema: {
        summary: "Write to a process's stdin (reserved with stdin: true): JSON { data } (text) or { data_base64 }, or raw bytes as application/octet-stream",
        params: PidParams,
        body: { content: { 'application/json': { schema: StdinBody }, 'application/octet-stream': { schema: StdinBytes } } },
        response: { 200: Empty, ...errors },
      },
    },
    async (request) => {
      const bytes = stdinBytes(request.body as Static<typeof StdinBody> | Buffer);
      await tracked(request.params.pid).writeStdin(bytes);
      return {};
    },
  );

  app.delete(
    '/:pid/stdin',
    { schema: { summary: 'Close a process\'s stdin (EOF)', params: PidParams, response: { 200: Empty, ...errors } } },
    async (request) => {
      await tracked(request.params.pid).closeStdin();
      return {};
    },
  );

  app.post(
    '/:pid/signal',
    { schema: { summary: 'Send a signal to a process\'s group', params: PidParams, body: SignalBody, response: { 200: Empty, ...errors } } },
    async (request) => {
      // After the shell has ended there is nothing left to signal (and its pid may be reused): a no-op.
      // The type provider infers through its own TypeBox, which cannot see through Unsafe: the schema guarantees the name.
      tracked(request.params.pid).signal(request.body.signal as SignalName);
      return {};
    },
  );

  app.delete(
    '/:pid',
    { schema: { summary: 'Kill a process tree and forget it', params: PidParams, response: { 200: Killed, ...errors } } },
    async (request) => {
      const pid = Number(request.params.pid);
      const proc = processes.get(pid);
      if (!proc) return { killed: false };
      // Killed first and forgotten once it has ended: whoever follows it gets its exit (reason killed), not a cut
      // stream. A finished one may still have leftovers in its group. Forgetting kills the rest (and its holder).
      proc.kill();
      if (proc.running) await Promise.race([proc.finished, new Promise((resolve) => setTimeout(resolve, KILLED_EXIT_WAIT_MS).unref())]);
      await processes.forget(pid, proc);
      request.log.info({ pid }, 'killed on request');
      return { killed: true };
    },
  );

  app.post(
    '/:pid/resize',
    { schema: { summary: 'Resize a command\'s terminal (the foreground job gets SIGWINCH)', params: PidParams, body: ResizeBody, response: { 200: Empty, ...errors } } },
    async (request) => {
      await tracked(request.params.pid).resize(request.body.cols, request.body.rows);
      return {};
    },
  );
};

/**
 * Answers with a finished command's result, then marks the command collected
 * (forgotten once the answer has been read out of its log, or --keep-collected
 * later).
 */
async function sendResult(reply: FastifyReply, proc: TrackedProcess, collect: () => void): Promise<CommandResultValue | FastifyReply> {
  const result = await commandResult(proc);
  markStart('result-read');
  if (!(result instanceof Readable)) {
    collect();
    return result;
  }
  if (reply.raw.destroyed) {
    // Nobody is left to read it.
    result.destroy();
    collect();
    return reply;
  }
  reply.raw.once('close', collect);
  // A failure while streaming comes after the status line: the stream's error aborts the connection.
  return reply.type('application/json; charset=utf-8').send(result);
}
