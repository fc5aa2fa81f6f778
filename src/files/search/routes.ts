import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ServerResponse } from 'node:http';
import type { SearchCalls } from '../../native/search-calls.js';
import type { SandboxState } from '../../sandbox-state.js';
import { resolveUser, userGroups } from '../../users.js';
import { readOwnerNames } from '../owner-names.js';
import { checkPath } from '../paths.js';
import { errors } from '../schemas.js';
import { prepareFind, type FindType } from './find.js';
import { compilePattern, type CaseMode } from './pattern.js';
import * as S from './schemas.js';
import { prepareSearch, type SearchSink } from './search.js';
import type { Reader } from './user-access.js';

/**
 * Whose permissions a search has. envd runs as root; a search for another
 * user checks that user's permission bits on everything it opens
 * (user-access.ts). Not root, envd can read only what its own user can: the kernel checks.
 */
async function readerFor(state: SandboxState, username: string | undefined): Promise<Reader | undefined> {
  const user = await resolveUser(username ?? state.defaultUser, username === undefined ? 'default_user' : 'username');
  if (process.getuid?.() !== 0 || user.uid === 0) return undefined;
  return { uid: user.uid, gids: new Set(await userGroups(user)) };
}

/** The response as a sink: writes while the client is there, waits while it is slow to read. */
function sinkOf(res: ServerResponse, contentType: string): SearchSink & { goneAt: number | undefined } {
  let gone = false;
  res.once('close', () => {
    gone = true;
    sink.goneAt = performance.now();
  });
  res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
  res.flushHeaders();
  const sink: SearchSink & { goneAt: number | undefined } = {
    goneAt: undefined,
    get gone() {
      return gone || res.destroyed;
    },
    write: (text: string) => {
      if (!gone) res.write(text);
    },
    waitForRoom: () =>
      gone || !res.writableNeedDrain
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            const done = () => {
              res.off('drain', done);
              res.off('close', done);
              resolve();
            };
            res.on('drain', done);
            res.on('close', done);
          }),
  };
  return sink;
}

export const searchRoutes: FastifyPluginAsyncTypebox<{ state: SandboxState; searchCalls: SearchCalls | undefined }> = async (app, { state, searchCalls }) => {
  app.post(
    '/search',
    {
      schema: {
        summary: 'Search file contents (ripgrep semantics); NDJSON lines streamed as found, then a summary',
        body: S.SearchBody,
        produces: ['application/x-ndjson'],
        response: { 200: S.SearchLine, ...errors(400, 403, 404) },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const path = checkPath(body.path, 'path');
      const pattern = compilePattern(body.pattern, body.literal ?? false, (body.case ?? 'smart') as CaseMode);
      const reader = await readerFor(state, body.username);
      // Opening the root may fail (404, 403): still a plain JSON answer.
      const run = prepareSearch({
        root: path,
        pattern,
        walk: { hidden: body.hidden ?? false, gitignore: body.gitignore ?? true, include: body.include ?? [], exclude: body.exclude ?? [], reader, searchCalls },
        scan: { context: body.context ?? 0, maxPerFile: body.max_per_file ?? Number.POSITIVE_INFINITY, maxFileBytes: body.max_file_bytes ?? 0, bytes: searchCalls },
        maxResults: body.max_results ?? Number.POSITIVE_INFINITY,
        timeoutMs: body.timeout_ms ?? S.DEFAULT_SEARCH_TIMEOUT_MS,
      });
      reply.hijack();
      const sink = sinkOf(reply.raw, 'application/x-ndjson');
      try {
        const summary = await run(sink);
        sink.write(`${JSON.stringify(summary)}\n`);
        // How long the search ran on after its client left (the tests check it is short).
        const afterDisconnect = sink.goneAt === undefined ? undefined : Math.round(performance.now() - sink.goneAt);
        request.log.info({ path, ...summary, client_gone: sink.gone, stopped_after_disconnect_ms: afterDisconnect }, 'search ended');
      } catch (error) {
        request.log.error({ err: error, path }, 'search failed');
      } finally {
        if (!reply.raw.writableEnded) reply.raw.end();
      }
    },
  );

  app.get(
    '/find',
    {
      schema: {
        summary: 'List files (or directories) whose path matches a glob, by ripgrep\'s ignore rules; streamed JSON',
        querystring: S.FindQuery,
        response: { 200: S.FoundEntries, ...errors(400, 403, 404) },
      },
    },
    async (request, reply) => {
      const query = request.query;
      const path = checkPath(query.path, 'path');
      const reader = await readerFor(state, query.username);
      const run = prepareFind({
        root: path,
        glob: query.glob,
        type: (query.type ?? 'file') as FindType,
        maxResults: query.max_results ?? S.DEFAULT_FIND_RESULTS,
        walk: { hidden: query.hidden ?? false, gitignore: query.gitignore ?? true, include: [], exclude: [], reader, searchCalls },
        names: await readOwnerNames(),
      });
      reply.hijack();
      const sink = sinkOf(reply.raw, 'application/json');
      try {
        await run(sink);
      } catch (error) {
        request.log.error({ err: error, path }, 'find failed');
      } finally {
        if (!reply.raw.writableEnded) reply.raw.end();
      }
    },
  );
};
