import type { TSchema } from '@sinclair/typebox';
import { CommandEvents } from '../commands/schemas.js';
import { WatchEvents } from '../files/schemas.js';
import { PortEvents } from '../ports/schemas.js';
import { SessionEvents } from '../sessions/schemas.js';

/**
 * What the OpenAPI document says about each route beyond its schema, in one
 * place: a stable verb-noun operationId (generated clients name their methods
 * after it), its tag, every error status it can answer, the headers it reads
 * and sets, and the events of a stream. A route missing here gets no
 * operationId, which the OpenAPI tests and `redocly lint` report.
 *
 * Routes keep declaring what they validate and serialise; statuses listed
 * here are added to the ones a route declares itself.
 */
export interface OperationDoc {
  operationId: string;
  tag: Tag;
  /** Error statuses beyond 400 (a route with input), 401 (a route with auth), 500 and 503 (every route). */
  errors?: readonly number[];
  /** Request headers the route reads. */
  headers?: readonly RequestHeader[];
  /** Response headers per success status. */
  responseHeaders?: Record<number, readonly ResponseHeader[]>;
  /** A server-sent-event stream: its events and how they are framed. */
  events?: EventStream;
}

export interface EventStream {
  /** Event name to the schema of its `data`: the document's `x-events`. */
  data: Record<string, TSchema>;
  /** The 200 answer's description. */
  success: string;
  /** What the events' ids and retry mean. */
  framing: string;
}

const COMMAND_STREAM: EventStream = {
  data: CommandEvents,
  success: 'The command runs: start, its output, then exit',
  framing:
    'Output events (stdout, stderr, truncated) carry an `id:` `<stdout bytes>-<stderr bytes>`: the position in each stream after the event ' +
    '(decimal byte counts of what the command wrote). Sent back as `Last-Event-ID` (or `?from=`) to GET /commands/{pid}/stream, the stream resumes ' +
    "right after it: nothing twice, nothing skipped. No `retry:` is sent: a reconnect is the client's choice (POSTing again runs the command again). " +
    'With `encoding: base64` (`?encoding=base64` on attach) output events\' `data` is base64 of the raw bytes, else UTF-8 text. ' +
    'The last event is `exit`, or `error` `{message}` when envd cannot go on (the command may still run: attach again or wait); then the response ends.',
};

const SESSION_STREAM: EventStream = {
  data: SessionEvents,
  success: "The command runs in the session's shell: start, its output, then exit",
  framing:
    'As /commands/stream, without ids (a session command cannot be resumed: POSTing again runs it again) and without `truncated`. ' +
    "With `encoding: base64` output events' `data` is base64 of the raw bytes, else UTF-8 text. The last event is `exit` " +
    '(`session_ended: true` when the command ended the shell), or `error` `{message}` when envd lost the shell\'s holder; then the response ends.',
};

const WATCH_STREAM: EventStream = {
  data: WatchEvents,
  success: 'The watch is armed: ready, then its changes',
  framing:
    'First `ready`, then one `change` per create, modify or delete. Events carry no `id:` and no `retry:` is sent: a watch cannot be resumed, ' +
    'and a new one misses the changes in between (list the directory again after its `ready`). An `error` event ends the stream.',
};

const PORTS_STREAM: EventStream = {
  data: PortEvents,
  success: 'The watch runs: ready with every port open now, then open and close events',
  framing:
    'First `ready` `{ports}`, then one `open` or `close` per socket that starts or stops listening (TCP) or is bound or closed (UDP), ' +
    'within ~100 ms of it. Events carry no `id:` and no `retry:` is sent: a new watch\'s `ready` says what is open.',
};

export type Tag = 'lifecycle' | 'commands' | 'sessions' | 'files' | 'ports' | 'services';

export const TAGS: { name: Tag; description: string }[] = [
  { name: 'lifecycle', description: 'Health, /init (token, envs, defaults, clock, a fork\'s identity), snapshot prepare and thaw, metrics and this document' },
  { name: 'commands', description: 'Run commands; stream, attach, resume and read their output; stdin, signals, terminals' },
  { name: 'sessions', description: 'Shells whose state (cwd, variables, functions, options) carries from one command to the next' },
  { name: 'files', description: 'Read, write, upload, download, archive, list, move, remove and watch files' },
  { name: 'ports', description: 'Listening ports of the guest, who holds them, and their changes as they happen' },
  { name: 'services', description: 'Supervised commands: restart policies with back-off, readiness, dependencies, boot files' },
];

interface RequestHeader {
  name: string;
  description: string;
}
export interface ResponseHeader {
  name: string;
  description: string;
  type?: 'string' | 'integer';
}

/** What each error status means, as the document says it. */
export const STATUS_TEXT: Record<number, string> = {
  400: 'Invalid request: the message names the field (a malformed body or a wrong Content-Type too)',
  401: 'Missing or wrong token, or envd not initialised',
  403: 'Permission denied (EACCES, EPERM, a read-only file system, or a user envd cannot act as)',
  404: 'Not found: no such path, or a pid envd does not track',
  408: 'Timed out: the command still runs (wait), or the request body stalled',
  409: 'Conflict with the current state: exists, not empty, no stdin or terminal, no cgroups, a session command running',
  410: 'Gone: the session has ended (its shell exited, or it was ended)',
  413: 'Too large: the body, the file, the listing or the path is past its limit',
  416: 'Range not satisfiable: past the end (Content-Range says the size)',
  500: 'Internal error; the message carries the request id and hides internals',
  503: 'Temporarily unavailable: envd is shutting down, out of file descriptors, processes or slots, or (file routes) a network or FUSE mount on the path has not answered for 5 s; retry shortly',
  507: 'No space left on the device or quota',
};

/** The statuses every file-system call can map to (src/errors.ts). */
const FS_READ = [403, 404] as const;
const FS_WRITE = [...FS_READ, 409, 413, 507] as const;
/** A streamed upload body: one that stalls is a 408 (src/files/body-takeover.ts). */
const UPLOAD = [...FS_WRITE, 408] as const;
/** A command that is starting: a user it cannot be run as, limits without cgroups, a body too large. */
const COMMAND_START = [403, 409, 413] as const;

/** Work that takes its share of the memory budget first (src/memory-budget.ts) answers 503 with this while the share is spent. */
const RETRY: Record<number, readonly ResponseHeader[]> = {
  503: [{ name: 'Retry-After', type: 'integer', description: 'Seconds to wait before retrying (1): envd\'s memory for this kind of work is in use' }],
};

const RANGE: RequestHeader = { name: 'Range', description: 'A single `bytes=start-end` range (also `start-` and `-suffix`); answered with 206' };
const KEPT: ResponseHeader[] = [
  { name: 'x-envd-kept-bytes', type: 'integer', description: 'How many bytes of the stream are kept (the resource a range addresses)' },
  { name: 'x-envd-written-bytes', type: 'integer', description: 'How many bytes the command wrote to the stream (more than kept once the cap or the budgets cut it)' },
];
const UNSATISFIABLE: ResponseHeader[] = [{ name: 'Content-Range', description: '`bytes */size`: how many bytes there are' }];
const PARTIAL = (what: string): ResponseHeader[] => [
  { name: 'Content-Range', description: `\`bytes start-end/size\` of the ${what} (206 only)` },
  { name: 'Accept-Ranges', description: '`bytes`' },
];


export const OPERATIONS: Record<string, OperationDoc> = {
  'GET /health': { operationId: 'getHealth', tag: 'lifecycle' },
  'POST /init': { operationId: 'initSandbox', tag: 'lifecycle', errors: [403, 404, 409, 413] },
  'GET /envs': { operationId: 'getEnvs', tag: 'lifecycle' },
  'GET /metrics': { operationId: 'getMetrics', tag: 'lifecycle' },
  'GET /openapi.json': { operationId: 'getOpenApiDocument', tag: 'lifecycle' },
  'POST /snapshot/prepare': { operationId: 'prepareSnapshot', tag: 'lifecycle', errors: [409, 413] },
  'POST /snapshot/thaw': { operationId: 'thawSnapshot', tag: 'lifecycle' },

  'POST /commands': { operationId: 'runCommand', tag: 'commands', errors: [...COMMAND_START, 404] },
  'POST /commands/stream': { operationId: 'streamCommand', tag: 'commands', errors: [...COMMAND_START, 404], responseHeaders: RETRY, events: COMMAND_STREAM },
  'GET /commands': { operationId: 'listCommands', tag: 'commands' },
  'GET /commands/{pid}/stats': { operationId: 'getCommandStats', tag: 'commands', errors: [404, 409] },
  'GET /commands/{pid}/stream': {
    operationId: 'attachCommand',
    tag: 'commands',
    errors: [404, 409, 416],
    headers: [{ name: 'Last-Event-ID', description: 'Resume after this event id (`<stdout bytes>-<stderr bytes>`), as an EventSource sends it on reconnecting; `?from=` wins over it' }],
    responseHeaders: RETRY,
    events: COMMAND_STREAM,
  },
  'GET /commands/{pid}/output': {
    operationId: 'getCommandOutput',
    tag: 'commands',
    errors: [404, 409, 416],
    headers: [RANGE],
    responseHeaders: { 200: [...KEPT, ...PARTIAL('kept output')], 206: [...KEPT, ...PARTIAL('kept output')], 416: UNSATISFIABLE },
  },
  'GET /commands/{pid}/ready': { operationId: 'waitCommandReady', tag: 'commands', errors: [404, 408, 409] },
  'GET /commands/{pid}/wait': { operationId: 'waitCommand', tag: 'commands', errors: [408] },
  'POST /commands/{pid}/stdin': { operationId: 'writeCommandStdin', tag: 'commands', errors: [404, 409, 413] },
  'DELETE /commands/{pid}/stdin': { operationId: 'closeCommandStdin', tag: 'commands', errors: [404, 409] },
  'POST /commands/{pid}/signal': { operationId: 'signalCommand', tag: 'commands', errors: [404, 413] },
  'DELETE /commands/{pid}': { operationId: 'killCommand', tag: 'commands' },
  'POST /commands/{pid}/resize': { operationId: 'resizeCommand', tag: 'commands', errors: [404, 409, 413] },

  'POST /sessions': { operationId: 'createSession', tag: 'sessions', errors: COMMAND_START },
  'GET /sessions': { operationId: 'listSessions', tag: 'sessions' },
  'POST /sessions/{id}/commands': { operationId: 'runSessionCommand', tag: 'sessions', errors: [404, 409, 410, 413] },
  'POST /sessions/{id}/commands/stream': { operationId: 'streamSessionCommand', tag: 'sessions', errors: [404, 409, 410, 413], responseHeaders: RETRY, events: SESSION_STREAM },
  'DELETE /sessions/{id}': { operationId: 'endSession', tag: 'sessions', errors: [404, 410] },

  'PUT /files/raw': { operationId: 'uploadFile', tag: 'files', errors: UPLOAD, headers: [{ name: 'Content-Length', description: 'Past the upload limit: 413 before any byte is written' }], responseHeaders: RETRY },
  'GET /files/raw': { operationId: 'downloadFile', tag: 'files', errors: [...FS_READ, 416], headers: [RANGE], responseHeaders: { 200: PARTIAL('file'), 206: PARTIAL('file'), 416: UNSATISFIABLE, ...RETRY } },
  'POST /files/batch': { operationId: 'writeFiles', tag: 'files', errors: FS_WRITE },
  'POST /files': { operationId: 'writeFile', tag: 'files', errors: FS_WRITE },
  'GET /files': { operationId: 'readFile', tag: 'files', errors: [...FS_READ, 413] },
  'DELETE /files': { operationId: 'removeEntry', tag: 'files', errors: [...FS_READ, 409] },
  'GET /files/exists': { operationId: 'entryExists', tag: 'files', errors: FS_READ },
  'GET /files/info': { operationId: 'getEntryInfo', tag: 'files', errors: FS_READ },
  'GET /files/archive': {
    operationId: 'downloadArchive',
    tag: 'files',
    errors: FS_READ,
    responseHeaders: { 200: [{ name: 'Content-Disposition', description: '`attachment; filename="<name>.tar"` (or `.tar.gz`)' }], ...RETRY },
  },
  'PUT /files/archive': { operationId: 'extractArchive', tag: 'files', errors: UPLOAD, responseHeaders: RETRY },
  'GET /files/list': { operationId: 'listDirectory', tag: 'files', errors: [...FS_READ, 413] },
  'POST /files/rename': { operationId: 'moveEntry', tag: 'files', errors: [...FS_WRITE] },
  'POST /files/mkdir': { operationId: 'makeDirectory', tag: 'files', errors: [...FS_WRITE] },
  'POST /files/watch': { operationId: 'watchDirectory', tag: 'files', errors: [...FS_READ, 413], responseHeaders: RETRY, events: WATCH_STREAM },
  'POST /files/search': { operationId: 'searchFiles', tag: 'files', errors: [...FS_READ, 413] },
  'GET /files/find': { operationId: 'findFiles', tag: 'files', errors: FS_READ },
  'POST /files/edit': { operationId: 'editFile', tag: 'files', errors: FS_WRITE },

  'GET /ports': { operationId: 'listPorts', tag: 'ports' },
  'GET /ports/watch': { operationId: 'watchPorts', tag: 'ports', responseHeaders: RETRY, events: PORTS_STREAM },

  'PUT /services/{name}': { operationId: 'putService', tag: 'services', errors: [...COMMAND_START] },
  'GET /services': { operationId: 'listServices', tag: 'services' },
  'GET /services/{name}': { operationId: 'getService', tag: 'services', errors: [404] },
  'DELETE /services/{name}': { operationId: 'deleteService', tag: 'services', errors: [404] },
  'POST /services/{name}/start': { operationId: 'startService', tag: 'services', errors: [404, 409] },
  'POST /services/{name}/stop': { operationId: 'stopService', tag: 'services', errors: [404] },
  'POST /services/{name}/restart': { operationId: 'restartService', tag: 'services', errors: [404, 409] },
  'GET /services/{name}/logs': {
    operationId: 'getServiceLogs',
    tag: 'services',
    errors: [404, 409, 416],
    headers: [{ name: 'Last-Event-ID', description: 'Start after this cursor (`<stdout bytes>-<stderr bytes>`); `?from=` wins over it' }],
    responseHeaders: RETRY,
    events: { ...COMMAND_STREAM, success: 'JSON page of the run\'s output from the cursor; with follow=1, its events until the run ends' },
  },
};
