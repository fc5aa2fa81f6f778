import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';

/**
 * What a control-plane team does with envd's document: generate types with
 * openapi-typescript and call every route through openapi-fetch. The program
 * below must compile with no casts, against the document the built envd serves,
 * and then run against that envd: every call answers as the document says.
 */

// The type openapi-typescript's documentation gives `format: binary` (it says `string` otherwise).
const BLOB = ts.factory.createTypeReferenceNode('Blob');

// Every call names its operation by method and path; the test checks that together they cover the document.
const PROGRAM = `
import createClient from 'openapi-fetch';
import type { components, paths } from './envd-api.js';

type EntryInfo = components['schemas']['EntryInfo'];
type CommandResult = components['schemas']['CommandResult'];
type ExitEvent = components['schemas']['ExitEvent'];
type WatchChangeEvent = components['schemas']['WatchChangeEvent'];
type Error = components['schemas']['Error'];
type FoundEntry = components['schemas']['FoundEntry'];
type Port = components['schemas']['Port'];

/** Calls every route; answers each call's status and a few values to check. */
export async function everyRoute(baseUrl: string, token: string, dir: string): Promise<{ statuses: Record<string, number>; values: Record<string, unknown> }> {
  const client = createClient<paths>({ baseUrl, headers: { authorization: 'Bearer ' + token } });
  // Bytes go as they are, with their type: openapi-fetch would send JSON (and say so) otherwise.
  const raw = { bodySerializer: (body: Blob) => body, headers: { 'content-type': 'application/octet-stream' } };
  const statuses: Record<string, number> = {};
  const note = <T extends { response: Response }>(key: string, answer: T): T => {
    statuses[key] = answer.response.status;
    return answer;
  };
  /** A stream's text until it ends, or its first piece only. */
  const text = async (body: ReadableStream<Uint8Array> | null, all: boolean): Promise<string> => {
    let out = '';
    const reader = body!.getReader();
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      out += new TextDecoder().decode(read.value);
      if (!all) break;
    }
    await reader.cancel();
    return out;
  };

  const version: string | undefined = note('GET /health', await client.GET('/health')).data?.version;
  note('POST /init', await client.POST('/init', { body: { envs: { A: '1' }, timestamp: new Date().toISOString() } }));
  const envs: Record<string, string> | undefined = note('GET /envs', await client.GET('/envs')).data;
  const cpus: number | undefined = note('GET /metrics', await client.GET('/metrics')).data?.cpu_count;
  const doc: string | undefined = note('GET /openapi.json', await client.GET('/openapi.json')).data?.openapi;
  // freeze "none": a sync and envd's own trim, nothing frozen on the machine running the test.
  const tookMs: number | undefined = note('POST /snapshot/prepare', await client.POST('/snapshot/prepare', { body: { freeze: 'none' } })).data?.took_ms;
  const thawedBy: string | undefined = note('POST /snapshot/thaw', await client.POST('/snapshot/thaw')).data?.by;

  const run = note('POST /commands', await client.POST('/commands', { body: { cmd: 'echo hi', timeout: 120 } }));
  const result: CommandResult | undefined = run.data && 'stdout' in run.data ? run.data : undefined;
  const failure: Error | undefined = run.error;
  const started = await client.POST('/commands', { body: { cmd: 'cat', background: true, stdin: true } });
  const pid = String(started.data && 'pid' in started.data ? started.data.pid : 0);
  const terminal = await client.POST('/commands', { body: { cmd: 'sleep 600', pty: { cols: 80, rows: 24 }, background: true } });
  const ptyPid = String(terminal.data && 'pid' in terminal.data ? terminal.data.pid : 0);
  const streamed = await text(note('POST /commands/stream', await client.POST('/commands/stream', { body: { cmd: 'echo streamed' }, parseAs: 'stream' })).response.body, true);
  const listed: number | undefined = note('GET /commands', await client.GET('/commands', { params: { query: { finished: true } } })).data?.processes.length;
  const stats: Error | undefined = note('GET /commands/{pid}/stats', await client.GET('/commands/{pid}/stats', { params: { path: { pid } } })).error;
  note('POST /commands/{pid}/stdin', await client.POST('/commands/{pid}/stdin', { params: { path: { pid } }, body: { data: 'in' } }));
  // The body's other two forms: bytes as base64, and the bytes themselves (application/octet-stream).
  await client.POST('/commands/{pid}/stdin', { params: { path: { pid } }, body: { data_base64: btoa('pu') } });
  await client.POST('/commands/{pid}/stdin', { params: { path: { pid } }, body: new Blob(['t']), ...raw, bodySerializer: (body: unknown) => body });
  note('DELETE /commands/{pid}/stdin', await client.DELETE('/commands/{pid}/stdin', { params: { path: { pid } } }));
  const attached = await text(note('GET /commands/{pid}/stream', await client.GET('/commands/{pid}/stream', { params: { path: { pid }, query: { from: '0-0' }, header: { 'Last-Event-ID': '0-0' } }, parseAs: 'stream' })).response.body, true);
  const output = note('GET /commands/{pid}/output', await client.GET('/commands/{pid}/output', { params: { path: { pid }, query: { stream: 'stdout' }, header: { Range: 'bytes=0-1' } }, parseAs: 'arrayBuffer' }));
  const kept: string | null = output.response.headers.get('x-envd-kept-bytes');
  const outputBytes: number | undefined = output.data?.byteLength;
  // After attach and output: a wait collects the command, and a collected command is forgotten.
  const waited: CommandResult | undefined = note('GET /commands/{pid}/wait', await client.GET('/commands/{pid}/wait', { params: { path: { pid }, query: { timeout_ms: 120000 } } })).data;
  const readyAfter: number | undefined = note('GET /commands/{pid}/ready', await client.GET('/commands/{pid}/ready', { params: { path: { pid: ptyPid }, query: { timeout_ms: 1000 } } })).data?.after_ms;
  note('POST /commands/{pid}/resize', await client.POST('/commands/{pid}/resize', { params: { path: { pid: ptyPid } }, body: { cols: 100, rows: 30 } }));
  note('POST /commands/{pid}/signal', await client.POST('/commands/{pid}/signal', { params: { path: { pid: ptyPid } }, body: { signal: 'SIGCONT' } }));
  const killed: boolean | undefined = note('DELETE /commands/{pid}', await client.DELETE('/commands/{pid}', { params: { path: { pid: ptyPid } } })).data?.killed;

  const session = note('POST /sessions', await client.POST('/sessions', { body: { shell: 'sh' } })).data;
  const id = session?.id ?? '';
  const sessionRun = note('POST /sessions/{id}/commands', await client.POST('/sessions/{id}/commands', { params: { path: { id } }, body: { cmd: 'cd /; X=kept' } })).data;
  const sessionStreamed = await text(note('POST /sessions/{id}/commands/stream', await client.POST('/sessions/{id}/commands/stream', { params: { path: { id } }, body: { cmd: 'echo "$X"' }, parseAs: 'stream' })).response.body, true);
  const sessions: number | undefined = note('GET /sessions', await client.GET('/sessions')).data?.sessions.length;
  const sessionEnded: boolean | undefined = note('DELETE /sessions/{id}', await client.DELETE('/sessions/{id}', { params: { path: { id } } })).data?.ended;

  const bytes = new Blob([new Uint8Array([1, 2, 3])]);
  const uploaded: string | undefined = note('PUT /files/raw', await client.PUT('/files/raw', { params: { query: { path: dir + '/a' } }, body: bytes, ...raw })).data?.sha256;
  const downloaded = note('GET /files/raw', await client.GET('/files/raw', { params: { query: { path: dir + '/a' }, header: { Range: 'bytes=0-1' } }, parseAs: 'blob' }));
  const range: string | null = downloaded.response.headers.get('content-range');
  note('POST /files/batch', await client.POST('/files/batch', { body: { files: [{ path: dir + '/tree/b', data: 'AQID', encoding: 'base64' }] } }));
  note('POST /files', await client.POST('/files', { body: { path: dir + '/c', data: 'text' } }));
  const read: string | undefined = note('GET /files', await client.GET('/files', { params: { query: { path: dir + '/c', encoding: 'utf8' } } })).data?.data;
  const lines: number | undefined = (await client.GET('/files', { params: { query: { path: dir + '/c', from_line: 1, lines: 1 } } })).data?.total_lines;
  const searched = await text(note('POST /files/search', await client.POST('/files/search', { body: { path: dir, pattern: 'tex', literal: true }, parseAs: 'stream' })).response.body, true);
  const found: FoundEntry[] | undefined = note('GET /files/find', await client.GET('/files/find', { params: { query: { path: dir, glob: 'c', type: 'file' } } })).data?.entries;
  const edited: number | undefined = note('POST /files/edit', await client.POST('/files/edit', { body: { path: dir + '/c', edits: [{ old: 'text', new: 'edited' }] } })).data?.replacements;
  const exists: boolean | undefined = note('GET /files/exists', await client.GET('/files/exists', { params: { query: { path: dir + '/c' } } })).data?.exists;
  const info: EntryInfo | undefined = note('GET /files/info', await client.GET('/files/info', { params: { query: { path: dir + '/c', checksum: 'sha256' } } })).data;
  const archive = note('GET /files/archive', await client.GET('/files/archive', { params: { query: { path: dir + '/tree', format: 'tar' } }, parseAs: 'blob' })).data;
  const extracted: number | undefined = note('PUT /files/archive', await client.PUT('/files/archive', { params: { query: { path: dir + '/x', mode: 'replace' } }, body: archive ?? bytes, ...raw })).data?.files;
  const entries: EntryInfo[] | undefined = note('GET /files/list', await client.GET('/files/list', { params: { query: { path: dir, depth: 2 } } })).data?.entries;
  const moved: EntryInfo | undefined = note('POST /files/rename', await client.POST('/files/rename', { body: { from: dir + '/c', to: dir + '/d' } })).data;
  const made: boolean | undefined = note('POST /files/mkdir', await client.POST('/files/mkdir', { body: { path: dir + '/e/f' } })).data?.created;
  const watched = await text(note('POST /files/watch', await client.POST('/files/watch', { body: { path: dir, recursive: true }, parseAs: 'stream' })).response.body, false);
  const ports: Port[] | undefined = note('GET /ports', await client.GET('/ports')).data?.ports;
  const portsWatched = await text(note('GET /ports/watch', await client.GET('/ports/watch', { parseAs: 'stream' })).response.body, false);
  const removed: boolean | undefined = note('DELETE /files', await client.DELETE('/files', { params: { query: { path: dir + '/d' } } })).data?.removed;

  const defined: string | undefined = note('PUT /services/{name}', await client.PUT('/services/{name}', { params: { path: { name: 'svc' } }, body: { cmd: 'echo served; sleep 900', ready: { log: 'served' } } })).data?.state;
  const services: number | undefined = note('GET /services', await client.GET('/services')).data?.services.length;
  note('GET /services/{name}', await client.GET('/services/{name}', { params: { path: { name: 'svc' } } }));
  note('POST /services/{name}/stop', await client.POST('/services/{name}/stop', { params: { path: { name: 'svc' } } }));
  note('POST /services/{name}/start', await client.POST('/services/{name}/start', { params: { path: { name: 'svc' } } }));
  note('POST /services/{name}/restart', await client.POST('/services/{name}/restart', { params: { path: { name: 'svc' } } }));
  note('GET /services/{name}/logs', await client.GET('/services/{name}/logs', { params: { path: { name: 'svc' }, query: { from: '0-0' }, header: { 'Last-Event-ID': '0-0' } } }));
  const deleted: boolean | undefined = note('DELETE /services/{name}', await client.DELETE('/services/{name}', { params: { path: { name: 'svc' } } })).data?.deleted;

  const exit: ExitEvent = { exit_code: 0, reason: 'exited' };
  const change: WatchChangeEvent = { type: 'create', path: dir };
  return {
    statuses,
    values: { version, envs, cpus, doc, tookMs, thawedBy, sessionRun, sessionStreamed, sessions, sessionEnded, result, failure, streamed, listed, stats, waited, readyAfter, defined, services, deleted, attached, kept, outputBytes, killed, uploaded, range, read, lines, searched, found, edited, exists, info, extracted, entries, moved, made, watched, ports, portsWatched, removed, exit, change },
  };
}
`;

let envd: EnvdProcess;
let document: { paths: Record<string, Record<string, { operationId?: string }>> };
beforeAll(async () => {
  // Proc mode: the machine's cgroups stay untouched, and GET /commands/{pid}/stats answers 409.
  envd = await startEnvdProcess(['--command-cgroups', 'off'], { ENVD_ACCESS_TOKEN: 'tok' });
  document = await (await fetch(`${envd.url}/openapi.json`, { headers: { authorization: 'Bearer tok' } })).json();
});
afterAll(async () => envd?.stop());

describe('a client generated from the OpenAPI document', () => {
  // Type-checking takes ~15 s on an idle machine: generous for a loaded one.
  it('compiles a program that calls every route through openapi-fetch, with no casts', { timeout: 180_000 }, async () => {
    const types = astToString(await openapiTS(document as never, { transform: (schema) => (schema.format === 'binary' ? BLOB : undefined) }));
    expect(types).toContain('EntryInfo');
    const dir = mkdtempSync(join(tmpdir(), 'envd-openapi-client-'));
    try {
      writeFileSync(join(dir, 'envd-api.d.ts'), types);
      writeFileSync(join(dir, 'program.ts'), PROGRAM);
      const program = ts.createProgram([join(dir, 'program.ts')], {
        strict: true,
        noEmit: true,
        noUncheckedIndexedAccess: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        lib: ['lib.es2022.d.ts', 'lib.dom.d.ts', 'lib.dom.asynciterable.d.ts'],
        types: [],
        // The generated files live outside the project: openapi-fetch is this project's.
        paths: { 'openapi-fetch': [resolve('node_modules/openapi-fetch/dist/index.d.mts')] },
      });
      const problems = ts.getPreEmitDiagnostics(program).map((d) => `${d.file ? `${d.file.fileName.slice(dir.length + 1)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1} ` : ''}${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
      expect(problems).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the program calls every operation of the document, and uses no casts', () => {
    const called = new Set([...PROGRAM.matchAll(/client\.(GET|PUT|POST|DELETE|PATCH)\('([^']+)'/g)].map(([, method, path]) => `${method} ${path}`));
    const operations = Object.entries(document.paths).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method.toUpperCase()} ${path}`));
    expect(operations.length).toBeGreaterThan(25);
    expect(operations.filter((operation) => !called.has(operation)), 'operations the program does not call (add them to PROGRAM)').toEqual([]);
    expect(PROGRAM).not.toMatch(/\bas\s+(unknown|any|never|[A-Z]\w*)\b|<any>|@ts-/);
  });

  it('runs that program against the envd: every call succeeds, the values are what envd holds', { timeout: 120_000 }, async () => {
    // The program as JavaScript (types erased), importing this project's openapi-fetch.
    const js = ts.transpileModule(PROGRAM, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText.replace(
      "from 'openapi-fetch'",
      `from '${pathToFileURL(resolve('node_modules/openapi-fetch/dist/index.mjs')).href}'`,
    );
    const dir = mkdtempSync(join(tmpdir(), 'envd-openapi-run-'));
    try {
      mkdirSync(join(dir, 'tree'));
      writeFileSync(join(dir, 'tree', 'one.txt'), 'one');
      const file = join(dir, 'program.mjs');
      writeFileSync(file, js);
      const { everyRoute } = (await import(pathToFileURL(file).href)) as { everyRoute: (url: string, token: string, dir: string) => Promise<{ statuses: Record<string, number>; values: Record<string, any> }> };
      const { statuses, values } = await everyRoute(envd.url, 'tok', join(dir, 'work'));
      const operations = Object.entries(document.paths).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method.toUpperCase()} ${path}`));
      expect(Object.keys(statuses).sort()).toEqual([...operations].sort());
      // Proc mode has no stats (409); every other call succeeds.
      expect(Object.entries(statuses).filter(([key, status]) => (key === 'GET /commands/{pid}/stats' ? status !== 409 : status >= 300))).toEqual([]);
      expect(statuses['GET /files/raw']).toBe(206);
      expect(values).toMatchObject({
        thawedBy: 'request',
        envs: { A: '1' },
        result: { stdout: 'hi\n', exit_code: 0 },
        waited: { stdout: 'input', exit_code: 0 },
        outputBytes: 2,
        kept: '5',
        readyAfter: 0,
        defined: 'starting',
        services: 1,
        deleted: true,
        killed: true,
        uploaded: '039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81',
        range: 'bytes 0-1/3',
        read: 'text',
        lines: 1,
        found: [{ name: 'c', type: 'file' }],
        edited: 1,
        exists: true,
        extracted: 1,
        made: true,
        removed: true,
        sessionRun: { stdout: '', exit_code: 0 },
        sessions: 1,
        sessionEnded: true,
      });
      expect(values.sessionStreamed).toContain('data: {"stream":"stdout","data":"kept\\n"}');
      expect(values.streamed).toMatch(/event: stdout\n(id: .*\n)?data: \{"stream":"stdout","data":"streamed\\n"\}/);
      expect(values.attached).toContain('event: exit');
      expect(values.watched).toContain('event:ready');
      // envd's own listener is among the ports, with its port number.
      expect(values.ports).toEqual(expect.arrayContaining([expect.objectContaining({ protocol: 'tcp', port: Number(new URL(envd.url).port), pid: envd.child.pid })]));
      expect(values.portsWatched).toContain('event:ready');
      expect(values.searched.trim().split('\n').map((line: string) => JSON.parse(line))).toEqual([
        expect.objectContaining({ type: 'match', path: join(dir, 'work', 'c'), line: 1, text: 'text' }),
        expect.objectContaining({ type: 'summary', matches: 1 }),
      ]);
      expect(values.info.sha256).toMatch(/^[0-9a-f]{64}$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
