import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { basename } from 'node:path';
import { Readable } from 'node:stream';
import type { Config } from '../config.js';
import { RESERVE_BYTES } from '../memory-budget.js';
import { badRequest, HttpError, errnoToHttpError } from '../errors.js';
import { extractArchive, hashedHere } from './archive-extract.js';
import { relayArchive } from './archive-relay.js';
import { packDirectory } from './archive-pack.js';
import { sha256Of, sha256OfHandle } from './checksum.js';
import type { SandboxState } from '../sandbox-state.js';
import { writeAtomically } from './atomic-write.js';
import { writeBatch } from './batch.js';
import { openDownload } from './download.js';
import { describePath } from './entry-info.js';
import { editFile } from './edit.js';
import { listDirectory } from './list.js';
import { makeDirectory } from './mkdir.js';
import { checkPath, resolveOwner } from './paths.js';
import { decodeData, readContent, readLineRange } from './read.js';
import { removeEntry } from './remove.js';
import { openRegular } from './user-file.js';
import { lstatPath } from './user-path.js';
import { moveEntry } from './rename.js';
import * as S from './schemas.js';
import type { SearchCalls } from '../native/search-calls.js';
import { searchRoutes } from './search/routes.js';
import { UPLOAD_LIMIT, checkUploadHeaders, receiveUpload } from './upload.js';
import { WatchRegistry } from './watch/registry.js';
import { armWatch, streamWatch } from './watch/stream.js';

export interface FileRoutesOptions {
  config: Config;
  state: SandboxState;
  /** The envd-holder binary: its --receive mode takes large uploads' bodies (upload-splice.ts), its --relay mode hashes large archives (archive-relay.ts). */
  receiver: string;
  /** The addon's openat for search and find; undefined where it did not load. */
  searchCalls: SearchCalls | undefined;
}

export const fileRoutes: FastifyPluginAsyncTypebox<FileRoutesOptions> = async (app, { state, receiver, searchCalls }) => {
  // Raw uploads reach the handler as the unread request stream; only this plugin sees this parser.
  app.addContentTypeParser(['application/octet-stream', 'application/x-tar', 'application/gzip'], (_request, payload, done) => done(null, payload));
  // Every watch of this app shares one watch per directory.
  const watches = new WatchRegistry();
  await app.register(searchRoutes, { state, searchCalls });

  app.put(
    '/raw',
    {
      bodyLimit: UPLOAD_LIMIT,
      config: { memory: { part: 'transfers', bytes: RESERVE_BYTES.upload } },
      schema: {
        summary: 'Upload a file (raw bytes, streamed, atomic)',
        querystring: S.UploadQuery,
        consumes: ['application/octet-stream'],
        response: { 200: S.Written, ...S.errors(400, 404, 409, 413, 507) },
      },
      // Before the body is parsed: wrong type or declared size is refused
      // without writing anything; the app's lingering close then drops the body.
      onRequest: async (request) => checkUploadHeaders(request.headers),
    },
    async (request, reply) => {
      const path = checkPath(request.query.path, 'path');
      const owner = await resolveOwner(state, request.query.username);
      const { spliced, ...written } = await receiveUpload(request.raw, path, owner, receiver);
      // Node's parser still waits for the spliced body: this connection can take no further request.
      if (spliced) reply.header('connection', 'close');
      return written;
    },
  );

  app.get(
    '/raw',
    {
      config: { memory: { part: 'transfers', bytes: RESERVE_BYTES.download } },
      schema: {
        summary: 'Download a file (streamed; single Range requests answered with 206)',
        querystring: S.PathQuery,
        produces: ['application/octet-stream'],
        response: { 200: S.FileBytes, 206: S.FileBytes, ...S.errors(400, 404, 416) },
      },
    },
    async (request, reply) => {
      const path = checkPath(request.query.path, 'path');
      const download = await openDownload(path, request.headers.range, await resolveOwner(state, undefined));
      if (download.status === 416) {
        throw new HttpError(416, `range ${request.headers.range} is outside the file (${download.size} bytes)`, {
          headers: { 'content-range': `bytes */${download.size}` },
        });
      }
      // Read errors up to the first chunk were answered above as { message }; later ones abort the connection.
      return reply.code(download.status).headers(download.headers).send(download.body);
    },
  );

  app.post(
    '/batch',
    { schema: { summary: 'Write several files, all or nothing', body: S.BatchBody, response: { 200: S.BatchWritten, ...S.errors(400, 404, 409, 413, 507) } } },
    async (request) => {
      const entries = request.body.files.map((file, index) => ({
        path: checkPath(file.path, `files[${index}].path`),
        bytes: decodeData(file.data, file.encoding ?? 'utf8', `files[${index}].data`),
      }));
      const owner = await resolveOwner(state, request.body.username);
      const written = await writeBatch(entries, owner);
      return { files: written.map((file, index) => ({ ...file, sha256: sha256Of(entries[index]!.bytes) })) };
    },
  );

  app.post(
    '/',
    { schema: { summary: 'Write a file from JSON text (atomic)', body: S.WriteBody, response: { 200: S.Written, ...S.errors(400, 409, 413, 507) } } },
    async (request) => {
      const path = checkPath(request.body.path, 'path');
      const bytes = decodeData(request.body.data, request.body.encoding ?? 'utf8', 'data');
      const owner = await resolveOwner(state, request.body.username);
      return { ...(await writeAtomically(path, bytes, owner)), sha256: sha256Of(bytes) };
    },
  );

  app.get(
    '/',
    { schema: { summary: 'Read a file of up to 10 MiB as JSON, or a range of lines of any file', querystring: S.ReadQuery, response: { 200: S.FileContent, ...S.errors(400, 404, 413) } } },
    async (request) => {
      const { path, encoding = 'utf8', from_line, lines } = request.query;
      const owner = await resolveOwner(state, undefined);
      if (from_line === undefined && lines === undefined) return readContent(checkPath(path, 'path'), encoding, owner);
      return readLineRange(checkPath(path, 'path'), encoding, { from: from_line ?? 1, count: lines }, owner);
    },
  );

  app.post(
    '/edit',
    { schema: { summary: 'Exact edits of a file, all or nothing (each old must occur count times)', body: S.EditBody, response: { 200: S.Edited, ...S.errors(400, 404, 409, 413, 507) } } },
    async (request) => editFile(checkPath(request.body.path, 'path'), request.body.edits, request.body.expect_sha256),
  );

  app.delete(
    '/',
    { schema: { summary: 'Remove a file, symlink or directory tree', querystring: S.PathQuery, response: { 200: S.Removed, ...S.errors(400) } } },
    async (request) => removeEntry(checkPath(request.query.path, 'path')),
  );

  app.get(
    '/exists',
    { schema: { summary: 'Whether anything (even a dangling symlink) is at a path', querystring: S.PathQuery, response: { 200: S.Exists, ...S.errors(400) } } },
    async (request) => {
      const path = checkPath(request.query.path, 'path');
      if (path === '/') return { exists: true };
      const owner = await resolveOwner(state, undefined);
      const stats = await lstatPath(path, owner).catch((error: unknown) => {
        // A parent that is a file: nothing can be there.
        if (error instanceof HttpError && /not a directory/.test(error.message)) return undefined;
        throw error;
      });
      return { exists: stats !== undefined };
    },
  );

  app.get(
    '/info',
    { schema: { summary: 'Describe a file, directory or symlink (not followed); with checksum=sha256 a file\'s sha256 too', querystring: S.InfoQuery, response: { 200: S.Entry, ...S.errors(400, 404) } } },
    async (request) => {
      const path = checkPath(request.query.path, 'path');
      const owner = await resolveOwner(state, undefined);
      const entry = await describePath(path, owner);
      if (request.query.checksum === undefined) return entry;
      if (entry.type !== 'file') throw badRequest(`checksum: ${path} is a ${entry.type === 'dir' ? 'directory' : 'symlink'}, not a regular file`);
      // A FIFO or device (reported as type "file") is refused before a byte is read; the hash stops when the client leaves.
      const { handle } = await openRegular(path, owner);
      const left = new AbortController();
      const onClose = () => left.abort();
      request.raw.socket.once('close', onClose);
      try {
        return { ...entry, sha256: await sha256OfHandle(handle, undefined, left.signal) };
      } finally {
        request.raw.socket.off('close', onClose);
        await handle.close();
      }
    },
  );

  app.get(
    '/archive',
    {
      config: { memory: { part: 'archives', bytes: RESERVE_BYTES.archiveDownload } },
      schema: {
        summary: 'Download a directory tree as tar or tar.gz (streamed: modes, mtimes, owners, symlinks not followed)',
        querystring: S.ArchiveQuery,
        produces: ['application/x-tar', 'application/gzip'],
        response: { 200: S.ArchiveBytes, ...S.errors(400, 404) },
      },
    },
    async (request, reply) => {
      const format = (request.query.format ?? 'tar') as 'tar' | 'tar.gz';
      const path = checkPath(request.query.path, 'path');
      const body = await packDirectory(path, format, await resolveOwner(state, undefined), request.query.sha256 ?? false);
      const name = basename(path) || 'root';
      return reply
        .type(format === 'tar' ? 'application/x-tar' : 'application/gzip')
        .header('content-disposition', `attachment; filename="${name.replace(/[^\w.-]/g, '_')}.${format}"`)
        .send(body);
    },
  );

  app.put(
    '/archive',
    {
      // No limit but the disk (extractArchive refuses what would fill it: 413).
      bodyLimit: Number.MAX_SAFE_INTEGER,
      config: { memory: { part: 'archives', bytes: RESERVE_BYTES.archiveUpload } },
      schema: {
        summary: 'Extract a streamed tar or tar.gz into a directory, all or nothing (mode create, merge or replace)',
        querystring: S.ExtractQuery,
        consumes: ['application/x-tar', 'application/gzip', 'application/octet-stream'],
        response: { 200: S.Extracted, ...S.errors(400, 404, 409, 413, 507) },
      },
    },
    async (request, reply) => {
      const path = checkPath(request.query.path, 'path');
      if (path === '/') throw badRequest('path: cannot extract over /');
      // Only the raw content types come as a stream; no body, or one fastify parsed (JSON), is not an archive.
      if (!(request.body instanceof Readable)) throw badRequest('body: a tar or tar.gz archive is required (content-type application/x-tar, application/gzip or application/octet-stream)');
      const owner = await resolveOwner(state, request.query.username);
      const mode = (request.query.mode ?? 'create') as 'create' | 'merge' | 'replace';
      // Setuid and setgid bits only where root extracts for root.
      const options = { owner, keepSetId: owner?.uid === 0 };
      const relayed = relayArchive(request.raw, receiver);
      if (!relayed) return extractArchive(hashedHere(request.body), path, mode, options);
      // Node's parser still waits for the relayed body: this connection can take no further request.
      reply.header('connection', 'close');
      try {
        return await extractArchive(relayed, path, mode, options);
      } finally {
        await relayed.close();
      }
    },
  );

  app.get(
    '/list',
    { schema: { summary: 'List a directory down to `depth` levels', querystring: S.ListQuery, response: { 200: S.EntryList, ...S.errors(400, 404, 413) } } },
    async (request) => ({ entries: await listDirectory(checkPath(request.query.path, 'path'), request.query.depth ?? 1, await resolveOwner(state, undefined)) }),
  );

  app.post(
    '/rename',
    { schema: { summary: 'Move or rename; creates the parents of `to`', body: S.RenameBody, response: { 200: S.Entry, ...S.errors(400, 404, 409) } } },
    async (request) => {
      const from = checkPath(request.body.from, 'from');
      const to = checkPath(request.body.to, 'to');
      return moveEntry(from, to, await resolveOwner(state, undefined));
    },
  );

  app.post(
    '/mkdir',
    { schema: { summary: 'Create a directory with its parents', body: S.MkdirBody, response: { 200: S.Made, ...S.errors(400, 409) } } },
    async (request) => {
      const path = checkPath(request.body.path, 'path');
      return makeDirectory(path, await resolveOwner(state, request.body.username));
    },
  );

  app.post(
    '/watch',
    {
      config: { memory: { part: 'watches', bytes: RESERVE_BYTES.watch } },
      schema: {
        summary: 'Watch a directory: text/event-stream of ready, then change events',
        body: S.WatchBody,
        produces: ['text/event-stream'],
        response: S.errors(400, 404, 503),
      },
    },
    async (request, reply) => {
      const path = checkPath(request.body.path, 'path');
      // Errors up to here (and while arming) are plain JSON answers; after hijack the stream owns the socket.
      const armed = await armWatch(watches, path, request.body.recursive ?? false, await resolveOwner(state, undefined));
      reply.hijack();
      await streamWatch(armed, request.raw, reply.raw, request.log);
    },
  );
};

