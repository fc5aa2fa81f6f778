import { Ajv, type ValidateFunction } from 'ajv';
import formats from 'ajv-formats';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMountFuse, mountHungFuse } from '../helpers/hung-fuse.js';
import { startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { parseSse } from '../../src/client/sse.js';

/**
 * Every route of a running envd (the built bundle, over real sockets) against
 * its own OpenAPI document: positive and negative requests per operation, and
 * for each answer the status must be one the operation declares and the body
 * must validate (ajv) against that status's schema; a stream's events against
 * its `x-events`. Operations come from the document: one without an
 * operationId, or without cases below, fails the test by name.
 */

type JsonObject = Record<string, any>;
interface Operation {
  key: string;
  template: string;
  method: string;
  operation: JsonObject;
}
interface Request {
  pid?: number;
  /** A session id for {id}; the shared live session unless given. */
  id?: string;
  /** A service's name in /services/{name} paths (default conf). */
  service?: string;
  query?: Record<string, string | undefined>;
  headers?: Record<string, string>;
  json?: unknown;
  body?: BodyInit;
  token?: string | null;
  /** For streams: stop reading (and cut the connection) once an event says so. */
  until?: (event: string) => boolean;
  /** Runs once the stream's first event has arrived (a watch's `ready`). */
  whenStarted?: () => void;
}
interface Case extends Request {
  name: string;
  status: number;
}

const TOKEN = 'conformance-token';
let envd: EnvdProcess;
let document: JsonObject;
let dir: string;
/** A FUSE mount that never answers (where this machine lets a test mount one): the file routes' 503. Outside `dir`, whose trees the other cases list and watch. */
let hungDir: string | undefined;
let hung: string | undefined;
let releaseHung = () => {};
/** A case on the hung mount, where there is one. */
const onHungMount = (request: Request): Case[] => (hung ? [{ name: 'on a mount that does not answer', status: 503, ...request }] : []);
/** A small tar made by tar(1). */
let tar: Uint8Array<ArrayBuffer>;
const ajv = new Ajv({ strict: false, allErrors: true });
// ajv-formats is CommonJS: its default export is the function under NodeNext's interop.
(formats as unknown as { default: (ajv: Ajv) => void }).default(ajv);
const validators = new Map<unknown, ValidateFunction>();
/** Ran cases by operation key, to check every operation got at least one positive and one negative. */
const seen = new Map<string, Set<'positive' | 'negative'>>();

/** Pids the cases share: a sleeper with stdin, one without, a pty, a finished background command. */
const pids = { sleeper: 0, closed: 0, pty: 0, finished: 0, ready: 0, unready: 0, endedUnready: 0, untracked: 9_999_999 };
/** Sessions the cases share: a live one, one to end, one ended, and an id never given out. */
const sessions = { live: '', toEnd: '', ended: '', unknown: '00000000-0000-4000-8000-000000000000' };

async function json(method: string, path: string, body?: unknown): Promise<any> {
  const response = await fetch(envd.url + path, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect(response.status, `${method} ${path}`).toBe(200);
  return response.json();
}

beforeAll(async () => {
  envd = await startEnvdProcess(['--command-cgroups', 'off'], { ENVD_ACCESS_TOKEN: TOKEN });
  document = await (await fetch(`${envd.url}/openapi.json`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
  // The document's components under one id: `#/components/...` in an operation's schema points there.
  ajv.addSchema({ $id: 'envd', components: document.components });
  dir = mkdtempSync(join(tmpdir(), 'envd-conformance-'));
  mkdirSync(join(dir, 'tree'));
  writeFileSync(join(dir, 'tree', 'a.txt'), 'hello');
  writeFileSync(join(dir, 'file.txt'), 'hello world');
  writeFileSync(join(dir, 'edit.txt'), 'one two');
  tar = new Uint8Array(execFileSync('tar', ['-cf', '-', '-C', join(dir, 'tree'), 'a.txt']));
  pids.sleeper = (await json('POST', '/commands', { cmd: 'sleep 600', background: true, stdin: true })).pid;
  pids.closed = (await json('POST', '/commands', { cmd: 'sleep 600', background: true })).pid;
  pids.pty = (await json('POST', '/commands', { cmd: 'sleep 600', pty: { cols: 80, rows: 24 }, background: true })).pid;
  pids.finished = (await json('POST', '/commands', { cmd: 'echo out; echo err >&2', background: true })).pid;
  for (const name of ['live', 'toEnd', 'ended'] as const) {
    const response = await fetch(`${envd.url}/sessions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{}' });
    expect(response.status).toBe(201);
    sessions[name] = ((await response.json()) as { id: string }).id;
  }
  await json('POST', `/sessions/${sessions.ended}/commands`, { cmd: 'exit 0' });
  pids.ready = (await json('POST', '/commands', { cmd: 'echo up; sleep 900', background: true, ready: { log: '^up$' } })).pid;
  pids.unready = (await json('POST', '/commands', { cmd: 'sleep 900', background: true, ready: { log: 'never' } })).pid;
  pids.endedUnready = (await json('POST', '/commands', { cmd: 'exit 2', background: true, ready: { port: 1 } })).pid;
  // Services: conf runs and prints, doomed is deleted, blocked waits for a dependency that is never ready.
  await fetch(`${envd.url}/services/conf`, { method: 'PUT', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'echo hi; sleep 900' }) });
  await fetch(`${envd.url}/services/doomed`, { method: 'PUT', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'sleep 900' }) });
  await fetch(`${envd.url}/services/never`, { method: 'PUT', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'sleep 900', ready: { log: 'never' } }) });
  await fetch(`${envd.url}/services/blocked`, { method: 'PUT', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'sleep 900', depends_on: ['never'] }) });
  // Generous: on a loaded 2-core CI machine a login shell's start alone can take seconds.
  await waitFor(async () => !(await json('GET', '/commands')).processes.find((p: { pid: number }) => p.pid === pids.finished).running, 90_000, 'the background command to end');
  if (canMountFuse) {
    hungDir = mkdtempSync(join(tmpdir(), 'envd-conformance-hung-'));
    hung = join(hungDir, 'hung');
    mkdirSync(hung);
    releaseHung = mountHungFuse(hung);
    // envd reads the mount table at most every MOUNT_TABLE_TTL_MS (250 ms).
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}, 120_000);

afterAll(async () => {
  releaseHung();
  if (hungDir) rmSync(hungDir, { recursive: true, force: true });
  await envd?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function operations(): Operation[] {
  return Object.entries(document.paths as Record<string, JsonObject>).flatMap(([template, methods]) =>
    Object.entries(methods).map(([method, operation]) => ({ key: `${method.toUpperCase()} ${template}`, template, method: method.toUpperCase(), operation })),
  );
}

/** A schema of the document, compiled once, its `#/components` refs pointing into the document. */
function validator(schema: unknown): ValidateFunction {
  const known = validators.get(schema);
  if (known) return known;
  const validate = ajv.compile(JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"envd#/components/')));
  validators.set(schema, validate);
  return validate;
}

function valid(schema: unknown, value: unknown, what: string): void {
  const validate = validator(schema);
  expect(validate(value), `${what}: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(value).slice(0, 300)}`).toBe(true);
}

/** Sends one request and checks the answer against the operation's declared statuses and schemas. */
async function exchange(op: Operation, request: Request): Promise<{ status: number; body: unknown }> {
  const url = new URL(envd.url + op.template.replace('{pid}', String(request.pid ?? pids.untracked)).replace('{id}', request.id ?? sessions.live).replace('{name}', request.service ?? 'conf'));
  for (const [name, value] of Object.entries(request.query ?? {})) if (value !== undefined) url.searchParams.set(name, value);
  const headers: Record<string, string> = { ...request.headers };
  if (request.token !== null) headers.authorization = `Bearer ${request.token ?? TOKEN}`;
  let body = request.body;
  if (request.json !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = JSON.stringify(request.json);
  }
  const abort = new AbortController();
  const response = await fetch(url, { method: op.method, headers, body, signal: abort.signal });
  const what = `${op.key} → ${response.status}`;
  const declared = op.operation.responses[String(response.status)];
  expect(declared, `${what} is not declared (src/lifecycle/openapi-operations.ts)`).toBeDefined();
  const type = response.headers.get('content-type')?.split(';')[0]?.trim();
  const content = declared.content as JsonObject | undefined;
  if (!content) {
    expect(await response.text(), `${what} declares no body`).toBe('');
    return { status: response.status, body: undefined };
  }
  expect(Object.keys(content), `${what} answered ${type}`).toContain(type);
  for (const name of Object.keys(declared.headers ?? {})) {
    // Declared headers may be conditional (Content-Range on a 200); the ones a 206 or 416 must send, it sends.
    if (response.status === 206 || (response.status === 416 && name === 'Content-Range')) expect(response.headers.get(name), `${what} header ${name}`).not.toBeNull();
  }
  if (type === 'application/json') {
    const parsed = await response.json();
    valid(content[type].schema, parsed, what);
    return { status: response.status, body: parsed };
  }
  if (type === 'application/x-ndjson') {
    const lines = (await response.text()).split('\n').filter((line) => line !== '');
    expect(lines.length, `${what} lines`).toBeGreaterThan(0);
    for (const line of lines) valid(content[type].schema, JSON.parse(line), `${what} line`);
    return { status: response.status, body: lines };
  }
  if (type === 'text/event-stream') {
    const events = content[type]['x-events'] as JsonObject;
    const names: string[] = [];
    try {
      for await (const event of parseSse(response.body!)) {
        expect(Object.keys(events), `${what}: event ${event.event}`).toContain(event.event);
        valid(events[event.event], event.data, `${what} event ${event.event}`);
        names.push(event.event);
        if (names.length === 1) request.whenStarted?.();
        if (request.until?.(event.event)) break;
      }
    } finally {
      abort.abort();
    }
    return { status: response.status, body: names };
  }
  return { status: response.status, body: Buffer.from(await response.arrayBuffer()) };
}

/** Just past JSON_BODY_LIMIT (10 MiB). */
const BIG = JSON.stringify({ data: 'x'.repeat(10 * 1024 * 1024) });
const big = () => BIG;

/** The cases per operationId: a positive (2xx) and a negative (4xx) at least, beside the ones derived from the document. */
const CASES: Record<string, () => Case[]> = {
  getHealth: () => [{ name: 'ok', status: 200, token: null }],
  initSandbox: () => [
    { name: 'envs and defaults', status: 204, json: { envs: { CONFORMANCE: '1' } } },
    { name: 'a timestamp that is no time', status: 400, json: { timestamp: 'yesterday' } },
    // The identity fields would write this machine's /etc: only their refusals run here (test/lifecycle/identity.test.ts, the guest suite).
    { name: 'entropy shorter than 32 bytes', status: 400, json: { entropy: Buffer.alloc(16).toString('base64') } },
    { name: 'a machine_id that is no hex', status: 400, json: { machine_id: 'z'.repeat(32) } },
  ],
  // Only what leaves this machine as it was: freeze "none" (a sync and envd's own trim), and the refusals.
  prepareSnapshot: () => [
    { name: 'no freeze: sync and trim', status: 200, json: { freeze: 'none', thaw_after_ms: 1000 } },
    { name: 'a freeze without cgroup v2 (--command-cgroups off)', status: 409, json: { freeze: 'commands' } },
    { name: 'an unknown freeze mode', status: 400, json: { freeze: 'everything' } },
  ],
  thawSnapshot: () => [
    { name: 'nothing frozen: thaws nothing', status: 200 },
    { name: 'without the token', status: 401, token: null },
  ],
  getEnvs: () => [{ name: 'the envs', status: 200 }],
  getMetrics: () => [{ name: 'the figures', status: 200 }],
  getOpenApiDocument: () => [{ name: 'the document', status: 200 }],

  runCommand: () => [
    { name: 'a foreground command', status: 200, json: { cmd: 'echo hi' } },
    { name: 'a background command', status: 200, json: { cmd: 'true', background: true } },
    { name: 'a relative cwd', status: 400, json: { cmd: 'true', cwd: 'relative' } },
    { name: 'limits without cgroups', status: 409, json: { cmd: 'true', limits: { pids: 10 } } },
  ],
  streamCommand: () => [
    { name: 'output of both streams', status: 200, json: { cmd: 'echo out; echo err >&2' } },
    { name: 'output as base64', status: 200, json: { cmd: 'printf "\\377"', encoding: 'base64' } },
    { name: 'an unknown encoding', status: 400, json: { cmd: 'true', encoding: 'latin1' } },
    { name: 'a negative timeout', status: 400, json: { cmd: 'true', timeout: -1 } },
    { name: 'ready on a line', status: 200, json: { cmd: 'echo up; sleep 0.2', ready: { log: 'up' } } },
    { name: 'a pattern the linear engine cannot run', status: 400, json: { cmd: 'true', ready: { log: '(a)\\1' } } },
  ],
  listCommands: () => [
    { name: 'with finished ones', status: 200, query: { finished: 'true' } },
    { name: 'an unknown parameter', status: 400, query: { everything: '1' } },
  ],
  getCommandStats: () => [
    { name: 'without cgroups', status: 409, pid: pids.sleeper },
    { name: 'an untracked pid', status: 404 },
  ],
  attachCommand: () => [
    { name: 'a finished command replayed', status: 200, pid: pids.finished },
    { name: 'resumed from an id', status: 200, pid: pids.finished, headers: { 'Last-Event-ID': '4-0' } },
    { name: 'replayed as base64', status: 200, pid: pids.finished, query: { encoding: 'base64' } },
    { name: 'from past the output', status: 416, pid: pids.finished, query: { from: '999999-0' } },
    { name: 'an untracked pid', status: 404 },
  ],
  getCommandOutput: () => [
    { name: 'all of stdout', status: 200, pid: pids.finished },
    { name: 'a range of stderr', status: 206, pid: pids.finished, query: { stream: 'stderr' }, headers: { Range: 'bytes=0-1' } },
    { name: 'from past the end', status: 416, pid: pids.finished, query: { from: '999999' } },
    { name: 'an untracked pid', status: 404 },
  ],
  waitCommandReady: () => [
    { name: 'ready on its output', status: 200, pid: pids.ready, query: { timeout_ms: '60000' } },
    { name: 'started without ready', status: 200, pid: pids.closed },
    { name: 'not ready after timeout_ms', status: 408, pid: pids.unready, query: { timeout_ms: '1' } },
    { name: 'ended before it was ready', status: 409, pid: pids.endedUnready, query: { timeout_ms: '60000' } },
    { name: 'an untracked pid', status: 404 },
  ],
  waitCommand: () => [
    { name: 'a finished command', status: 200, pid: pids.finished },
    { name: 'an untracked pid (the contract\'s result)', status: 200 },
    { name: 'still running after timeout_ms', status: 408, pid: pids.sleeper, query: { timeout_ms: '1' } },
  ],
  writeCommandStdin: () => [
    { name: 'to a reserved stdin', status: 200, pid: pids.sleeper, json: { data: 'input\n' } },
    { name: 'bytes as base64', status: 200, pid: pids.sleeper, json: { data_base64: '/wA=' } },
    { name: 'the bytes themselves', status: 200, pid: pids.sleeper, body: new Uint8Array([255, 0]), headers: { 'content-type': 'application/octet-stream' } },
    { name: 'both data and data_base64', status: 400, pid: pids.sleeper, json: { data: 'x', data_base64: 'eA==' } },
    { name: 'to a command without stdin', status: 409, pid: pids.closed, json: { data: 'x' } },
    { name: 'an untracked pid', status: 404, json: { data: 'x' } },
  ],
  closeCommandStdin: () => [
    { name: 'EOF', status: 200, pid: pids.sleeper },
    { name: 'an untracked pid', status: 404 },
  ],
  signalCommand: () => [
    { name: 'SIGCONT', status: 200, pid: pids.sleeper, json: { signal: 'SIGCONT' } },
    { name: 'an unknown signal', status: 400, pid: pids.sleeper, json: { signal: 'SIGFOO' } },
    { name: 'an untracked pid', status: 404, json: { signal: 'SIGTERM' } },
  ],
  resizeCommand: () => [
    { name: 'a terminal', status: 200, pid: pids.pty, json: { cols: 100, rows: 30 } },
    { name: 'a command without a terminal', status: 409, pid: pids.sleeper, json: { cols: 100, rows: 30 } },
    { name: 'too wide', status: 400, pid: pids.pty, json: { cols: 100_000, rows: 30 } },
  ],
  killCommand: () => [
    { name: 'a running command', status: 200, pid: pids.pty },
    { name: 'an untracked pid', status: 200 },
    { name: 'a pid that is no number', status: 400, pid: 'x' as unknown as number },
  ],

  createSession: () => [
    { name: 'a shell', status: 201, json: { shell: 'sh', envs: { A: '1' } } },
    { name: 'an unknown shell', status: 400, json: { shell: 'zsh' } },
    { name: 'limits without cgroups', status: 409, json: { limits: { pids: 10 } } },
  ],
  listSessions: () => [
    { name: 'the live sessions', status: 200 },
    { name: 'an unknown parameter', status: 400, query: { all: '1' } },
  ],
  runSessionCommand: () => [
    { name: 'a command', status: 200, json: { cmd: 'echo hi; echo err >&2' } },
    { name: 'with stdin and a timeout', status: 200, json: { cmd: 'cat', stdin: 'x', timeout: 10 } },
    { name: 'an empty cmd', status: 400, json: { cmd: '' } },
    { name: 'an unknown session', status: 404, id: sessions.unknown, json: { cmd: 'true' } },
    { name: 'an ended session', status: 410, id: sessions.ended, json: { cmd: 'true' } },
  ],
  streamSessionCommand: () => [
    { name: 'output of both streams', status: 200, json: { cmd: 'echo out; echo err >&2' } },
    { name: 'output as base64', status: 200, json: { cmd: 'printf "\\377"', encoding: 'base64' } },
    { name: 'an unknown encoding', status: 400, json: { cmd: 'true', encoding: 'latin1' } },
    { name: 'an ended session', status: 410, id: sessions.ended, json: { cmd: 'true' } },
  ],
  endSession: () => [
    { name: 'a live session', status: 200, id: sessions.toEnd },
    { name: 'an ended session', status: 410, id: sessions.ended },
    { name: 'an unknown session', status: 404, id: sessions.unknown },
  ],

  uploadFile: () => [
    { name: 'bytes', status: 200, query: { path: join(dir, 'up.bin') }, body: new Uint8Array([0, 1, 2, 255]), headers: { 'content-type': 'application/octet-stream' } },
    { name: 'a JSON body', status: 400, query: { path: join(dir, 'up.bin') }, json: { data: 'x' } },
    { name: 'under a file', status: 400, query: { path: join(dir, 'file.txt', 'x') }, body: 'x', headers: { 'content-type': 'application/octet-stream' } },
    ...onHungMount({ query: { path: `${hung}/up.bin` }, body: 'x', headers: { 'content-type': 'application/octet-stream' } }),
  ],
  downloadFile: () => [
    { name: 'a file', status: 200, query: { path: join(dir, 'file.txt') } },
    { name: 'a range', status: 206, query: { path: join(dir, 'file.txt') }, headers: { Range: 'bytes=0-4' } },
    { name: 'a range past the end', status: 416, query: { path: join(dir, 'file.txt') }, headers: { Range: 'bytes=100-' } },
    { name: 'a missing file', status: 404, query: { path: join(dir, 'missing') } },
  ],
  writeFiles: () => [
    { name: 'two files', status: 200, json: { files: [{ path: join(dir, 'b1'), data: 'one' }, { path: join(dir, 'b2'), data: 'AQID', encoding: 'base64' }] } },
    { name: 'a relative path', status: 400, json: { files: [{ path: 'b3', data: '' }] } },
  ],
  writeFile: () => [
    { name: 'text', status: 200, json: { path: join(dir, 'w.txt'), data: 'text' } },
    { name: 'over a directory', status: 400, json: { path: join(dir, 'tree'), data: 'x' } },
  ],
  readFile: () => [
    { name: 'text', status: 200, query: { path: join(dir, 'file.txt') } },
    { name: 'a range of lines', status: 200, query: { path: join(dir, 'file.txt'), from_line: '1', lines: '5' } },
    { name: 'line 0', status: 400, query: { path: join(dir, 'file.txt'), from_line: '0' } },
    { name: 'a missing file', status: 404, query: { path: join(dir, 'missing') } },
  ],
  removeEntry: () => [
    { name: 'a file', status: 200, query: { path: join(dir, 'b1') } },
    { name: 'nothing there', status: 200, query: { path: join(dir, 'missing') } },
    { name: 'a relative path', status: 400, query: { path: 'relative' } },
  ],
  entryExists: () => [
    { name: 'a file', status: 200, query: { path: join(dir, 'file.txt') } },
    { name: 'a relative path', status: 400, query: { path: 'relative' } },
  ],
  getEntryInfo: () => [
    { name: 'with its sha256', status: 200, query: { path: join(dir, 'file.txt'), checksum: 'sha256' } },
    { name: 'a checksum of a directory', status: 400, query: { path: join(dir, 'tree'), checksum: 'sha256' } },
    { name: 'a missing path', status: 404, query: { path: join(dir, 'missing') } },
    ...onHungMount({ query: { path: `${hung}/a` } }),
  ],
  downloadArchive: () => [
    { name: 'a tree as tar.gz', status: 200, query: { path: join(dir, 'tree'), format: 'tar.gz' } },
    { name: "a tree with each file's sha256", status: 200, query: { path: join(dir, 'tree'), sha256: 'true' } },
    { name: 'a missing tree', status: 404, query: { path: join(dir, 'missing') } },
    ...onHungMount({ query: { path: hung } }),
  ],
  extractArchive: () => [
    { name: 'a tar', status: 200, query: { path: join(dir, 'extracted') }, body: tar, headers: { 'content-type': 'application/x-tar' } },
    { name: 'create over an existing path', status: 409, query: { path: join(dir, 'tree') }, body: tar, headers: { 'content-type': 'application/x-tar' } },
    { name: 'no tar at all', status: 400, query: { path: join(dir, 'garbage') }, body: 'not a tar'.repeat(100), headers: { 'content-type': 'application/x-tar' } },
  ],
  listDirectory: () => [
    { name: 'two levels', status: 200, query: { path: dir, depth: '2' } },
    { name: 'too deep', status: 400, query: { path: dir, depth: '99' } },
    { name: 'a missing directory', status: 404, query: { path: join(dir, 'missing') } },
  ],
  moveEntry: () => [
    { name: 'a file', status: 200, json: { from: join(dir, 'w.txt'), to: join(dir, 'moved', 'w.txt') } },
    { name: 'a missing source', status: 404, json: { from: join(dir, 'missing'), to: join(dir, 'elsewhere') } },
  ],
  makeDirectory: () => [
    { name: 'with parents', status: 200, json: { path: join(dir, 'made', 'deep') } },
    { name: 'one that exists', status: 200, json: { path: join(dir, 'tree') } },
    { name: 'over a file', status: 409, json: { path: join(dir, 'file.txt') } },
    ...onHungMount({ json: { path: `${hung}/made` } }),
  ],
  watchDirectory: () => [
    {
      name: 'ready, then a change',
      status: 200,
      json: { path: join(dir, 'tree') },
      whenStarted: () => writeFileSync(join(dir, 'tree', 'new.txt'), 'x'),
      until: (event) => event === 'change',
    },
    { name: 'a file', status: 400, json: { path: join(dir, 'file.txt') } },
    { name: 'a missing directory', status: 404, json: { path: join(dir, 'missing') } },
  ],
  searchFiles: () => [
    { name: 'matches, then the summary', status: 200, json: { path: dir, pattern: 'hel+o', context: 1 } },
    { name: 'nothing found: the summary alone', status: 200, json: { path: dir, pattern: 'absent', literal: true } },
    { name: 'a relative path', status: 400, json: { path: 'relative', pattern: 'x' } },
    { name: 'a missing directory', status: 404, json: { path: join(dir, 'missing'), pattern: 'x' } },
  ],
  findFiles: () => [
    { name: 'by a glob', status: 200, query: { path: dir, glob: '*.txt', type: 'any' } },
    { name: 'an unknown type', status: 400, query: { path: dir, type: 'socket' } },
    { name: 'a missing directory', status: 404, query: { path: join(dir, 'missing') } },
  ],
  putService: () => [
    { name: 'a new service', status: 201, json: { cmd: 'sleep 900', restart: 'always' }, service: 'fresh' },
    { name: 'the same definition again', status: 200, json: { cmd: 'echo hi; sleep 900' } },
    { name: 'an unknown restart policy', status: 400, json: { cmd: 'true', restart: 'sometimes' }, service: 'bad' },
    { name: 'a missing dependency', status: 400, json: { cmd: 'true', depends_on: ['ghost'] }, service: 'bad' },
    { name: 'a name with a slash-free dot first', status: 400, json: { cmd: 'true' }, service: '.hidden' },
  ],
  listServices: () => [{ name: 'every service', status: 200 }],
  getService: () => [
    { name: 'a service', status: 200 },
    { name: 'an unknown service', status: 404, service: 'ghost' },
  ],
  deleteService: () => [
    { name: 'a service', status: 200, service: 'doomed' },
    { name: 'an unknown service', status: 404, service: 'ghost' },
  ],
  startService: () => [
    { name: 'a running one (nothing to do)', status: 200 },
    { name: 'an unknown service', status: 404, service: 'ghost' },
  ],
  stopService: () => [
    { name: 'a running one', status: 200 },
    { name: 'an unknown service', status: 404, service: 'ghost' },
  ],
  restartService: () => [
    { name: 'a stopped one', status: 200 },
    { name: 'an unknown service', status: 404, service: 'ghost' },
  ],
  getServiceLogs: () => [
    { name: 'a page', status: 200, query: { from: '0-0' } },
    { name: 'followed', status: 200, query: { follow: '1' }, until: (event) => event === 'stdout' },
    { name: 'a service that has not run', status: 409, service: 'blocked' },
    { name: 'from past the output', status: 416, query: { from: '999999-0' } },
    { name: 'a cursor that is no cursor', status: 400, query: { from: 'x' } },
    { name: 'an unknown service', status: 404, service: 'ghost' },
  ],
  editFile: () => [
    { name: 'one exact replacement', status: 200, json: { path: join(dir, 'edit.txt'), edits: [{ old: 'two', new: 'three' }] } },
    { name: 'an old text that is not there', status: 409, json: { path: join(dir, 'edit.txt'), edits: [{ old: 'absent', new: 'x' }] } },
    { name: 'no edits', status: 400, json: { path: join(dir, 'edit.txt'), edits: [] } },
    { name: 'a missing file', status: 404, json: { path: join(dir, 'missing'), edits: [{ old: 'a', new: 'b' }] } },
  ],

  listPorts: () => [{ name: 'the listening sockets', status: 200 }],
  watchPorts: () => {
    const listener = createServer();
    return [
      {
        name: 'ready, then an open and a close',
        status: 200,
        // Open for longer than a poll: a socket gone between two polls is never seen.
        whenStarted: () => void listener.listen(0, '127.0.0.1', () => setTimeout(() => listener.close(), 300)),
        until: (event) => event === 'close',
      },
    ];
  },
};

/** Operations this envd (proc mode, so that the test leaves the machine's cgroups alone) cannot answer with a success, and where that is proven. */
const NO_POSITIVE_HERE: Record<string, string> = { getCommandStats: 'cgroup mode only (this host has cgroup v1): test/guest/qemu-cgroups.test.ts reads stats' };

/** Negatives every operation gets from its own description: no token, a malformed or oversized body, a missing query parameter, a bad pid. */
function derivedCases(op: Operation): Case[] {
  const cases: Case[] = [];
  const security = op.operation.security as unknown[] | undefined;
  if (security?.length !== 0) cases.push({ name: 'no token', status: 401, token: null });
  const body = op.operation.requestBody;
  const wantsJson = body !== undefined && (body.$ref !== undefined || body.content?.['application/json'] !== undefined);
  if (wantsJson) {
    cases.push({ name: 'malformed JSON', status: 400, body: '{"path":', headers: { 'content-type': 'application/json' }, pid: pids.sleeper });
    cases.push({ name: 'a JSON array', status: 400, json: [], pid: pids.sleeper });
    cases.push({ name: 'a text/plain body', status: 400, body: 'text', headers: { 'content-type': 'text/plain' }, pid: pids.sleeper });
    cases.push({ name: 'a body past the JSON limit', status: 413, body: big(), headers: { 'content-type': 'application/json' }, pid: pids.sleeper });
  }
  const required = ((op.operation.parameters ?? []) as JsonObject[]).filter((p) => p.in === 'query' && p.required);
  if (required.length > 0) cases.push({ name: `without ${required.map((p) => p.name).join(', ')}`, status: 400, pid: pids.sleeper });
  if (op.template.includes('{pid}')) cases.push({ name: 'a pid with a leading zero', status: 400, pid: '01' as unknown as number });
  return cases;
}

describe('envd answers as its OpenAPI document says', () => {
  it('every operation has an operationId and conformance cases', () => {
    const lacking = operations().filter(({ operation }) => !operation.operationId || !CASES[operation.operationId]);
    expect(lacking.map(({ key, operation }) => `${key} (${operation.operationId ?? 'no operationId'})`), 'add them to CASES here').toEqual([]);
    expect(operations().length).toBeGreaterThan(25);
  });

  // In the document's order; killCommand's cases end the pty command that resizeCommand's used before.
  it('answers every case with a declared status and a body that validates', { timeout: 240_000 }, async () => {
    const order = operations().sort((a, b) => Number(a.operation.operationId === 'killCommand') - Number(b.operation.operationId === 'killCommand'));
    const failures: string[] = [];
    for (const op of order) {
      const cases = [...(CASES[op.operation.operationId]?.() ?? []), ...derivedCases(op)];
      for (const { name, status, ...request } of cases) {
        try {
          const answer = await exchange(op, request);
          expect(answer.status, `${op.key} ${name}: ${JSON.stringify(answer.body)?.slice(0, 200)}`).toBe(status);
          const kinds = seen.get(op.key) ?? new Set();
          kinds.add(status < 300 ? 'positive' : 'negative');
          seen.set(op.key, kinds);
        } catch (error) {
          failures.push(`${op.key} ${name}: ${(error as Error).message.split('\n')[0]}`);
        }
      }
    }
    expect(failures).toEqual([]);
    const incomplete = operations()
      .filter(({ key, operation }) => !seen.get(key)?.has('positive') && !(operation.operationId in NO_POSITIVE_HERE))
      .map(({ key }) => `${key}: no positive case`);
    const anyNegative = (op: Operation) => Object.keys(op.operation.responses).some((status) => /^4/.test(status));
    incomplete.push(...operations().filter((op) => anyNegative(op) && !seen.get(op.key)?.has('negative')).map(({ key }) => `${key}: no negative case`));
    expect(incomplete).toEqual([]);
  });

  it('a stream\'s events are the ones its x-events names, watch events without ids', { timeout: 60_000 }, async () => {
    const op = operations().find(({ operation }) => operation.operationId === 'streamCommand')!;
    const answer = await exchange(op, { json: { cmd: 'printf a; printf b >&2' } });
    expect(answer.body).toEqual(expect.arrayContaining(['start', 'stdout', 'stderr', 'exit']));
    // Raw: the watch's ready carries no id (nothing could resume from it), a command's output does.
    const watch = await fetch(`${envd.url}/files/watch`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ path: dir }) });
    const reader = watch.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    expect(first).toContain('event:ready');
    expect(first).not.toMatch(/^id:/m);
    expect(first).not.toMatch(/^retry:/m);
  });

  it('the validator rejects a body that breaks the schema (the checks are not vacuous)', () => {
    const schema = document.paths['/files/info'].get.responses['200'].content['application/json'].schema;
    expect(validator(schema)({ name: 'a' })).toBe(false);
    expect(validator(document.paths['/health'].get.responses['200'].content['application/json'].schema)({ status: 'ok', version: '1' })).toBe(true);
    expect(validator(document.paths['/files/info'].get.responses['404'].content['application/json'].schema)({ error: 'x' })).toBe(false);
  });
});
