import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';

/**
 * What a control-plane team does with envd's document: generate types with
 * openapi-typescript and call every route through openapi-fetch. The program
 * below must compile with no casts, against the document the built envd serves.
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

export async function everyRoute(baseUrl: string, token: string): Promise<void> {
  const client = createClient<paths>({ baseUrl, headers: { authorization: 'Bearer ' + token } });
  const raw = { bodySerializer: (body: Blob) => body };

  const health = await client.GET('/health');
  const version: string | undefined = health.data?.version;
  await client.POST('/init', { body: { envs: { A: '1' }, default_limits: { pids: 100 }, timestamp: new Date().toISOString() } });
  const envs: Record<string, string> | undefined = (await client.GET('/envs')).data;
  const cpus: number | undefined = (await client.GET('/metrics')).data?.cpu_count;
  const doc: string | undefined = (await client.GET('/openapi.json')).data?.openapi;

  const run = await client.POST('/commands', { body: { cmd: 'echo hi', timeout: 5, limits: { memory_bytes: 1 << 28 } } });
  const result: CommandResult | undefined = run.data && 'stdout' in run.data ? run.data : undefined;
  const failure: Error | undefined = run.error;
  const started = await client.POST('/commands', { body: { cmd: 'sleep 1', background: true, stdin: true } });
  const pid = String(started.data && 'pid' in started.data ? started.data.pid : 0);
  const stream: ReadableStream<Uint8Array> | null = (await client.POST('/commands/stream', { body: { cmd: 'ls', pty: { cols: 80, rows: 24 } }, parseAs: 'stream' })).response.body;
  const listed: number | undefined = (await client.GET('/commands', { params: { query: { finished: true } } })).data?.processes[0]?.pid;
  const memory: number | undefined = (await client.GET('/commands/{pid}/stats', { params: { path: { pid } } })).data?.memory_bytes;
  await client.GET('/commands/{pid}/stream', { params: { path: { pid }, query: { from: '0-0' }, header: { 'Last-Event-ID': '0-0' } }, parseAs: 'stream' });
  const output = await client.GET('/commands/{pid}/output', { params: { path: { pid }, query: { stream: 'stderr', from: 0, limit: 10 }, header: { Range: 'bytes=0-9' } }, parseAs: 'arrayBuffer' });
  const kept: string | null = output.response.headers.get('x-envd-kept-bytes');
  const waited: CommandResult | undefined = (await client.GET('/commands/{pid}/wait', { params: { path: { pid }, query: { timeout_ms: 100 } } })).data;
  await client.POST('/commands/{pid}/stdin', { params: { path: { pid } }, body: { data: 'input' } });
  await client.DELETE('/commands/{pid}/stdin', { params: { path: { pid } } });
  await client.POST('/commands/{pid}/signal', { params: { path: { pid } }, body: { signal: 'SIGTERM' } });
  await client.POST('/commands/{pid}/resize', { params: { path: { pid } }, body: { cols: 100, rows: 30 } });
  const killed: boolean | undefined = (await client.DELETE('/commands/{pid}', { params: { path: { pid } } })).data?.killed;

  const bytes = new Blob([new Uint8Array([1, 2, 3])]);
  const uploaded: string | undefined = (await client.PUT('/files/raw', { params: { query: { path: '/tmp/a' } }, body: bytes, ...raw })).data?.sha256;
  const downloaded = await client.GET('/files/raw', { params: { query: { path: '/tmp/a' }, header: { Range: 'bytes=0-1' } }, parseAs: 'blob' });
  const range: string | null = downloaded.response.headers.get('content-range');
  await client.POST('/files/batch', { body: { files: [{ path: '/tmp/b', data: 'AQID', encoding: 'base64' }] } });
  await client.POST('/files', { body: { path: '/tmp/c', data: 'text' } });
  const text: string | undefined = (await client.GET('/files', { params: { query: { path: '/tmp/c', encoding: 'utf8' } } })).data?.data;
  const exists: boolean | undefined = (await client.GET('/files/exists', { params: { query: { path: '/tmp/c' } } })).data?.exists;
  const info: EntryInfo | undefined = (await client.GET('/files/info', { params: { query: { path: '/tmp/c', checksum: 'sha256' } } })).data;
  await client.GET('/files/archive', { params: { query: { path: '/tmp', format: 'tar.gz' } }, parseAs: 'stream' });
  const extracted: number | undefined = (await client.PUT('/files/archive', { params: { query: { path: '/tmp/x', mode: 'replace' } }, body: bytes, ...raw })).data?.files;
  const entries: EntryInfo[] | undefined = (await client.GET('/files/list', { params: { query: { path: '/tmp', depth: 2 } } })).data?.entries;
  const moved: EntryInfo | undefined = (await client.POST('/files/rename', { body: { from: '/tmp/c', to: '/tmp/d' } })).data;
  const made: boolean | undefined = (await client.POST('/files/mkdir', { body: { path: '/tmp/e', username: 'root' } })).data?.created;
  await client.POST('/files/watch', { body: { path: '/tmp', recursive: true }, parseAs: 'stream' });
  const removed: boolean | undefined = (await client.DELETE('/files', { params: { query: { path: '/tmp/d' } } })).data?.removed;

  const exit: ExitEvent = { exit_code: 0, reason: 'exited' };
  const change: WatchChangeEvent = { type: 'create', path: '/tmp/e' };
  void [version, envs, cpus, doc, result, failure, stream, listed, memory, kept, waited, killed, uploaded, range, text, exists, info, extracted, entries, moved, made, removed, exit, change];
}
`;

let envd: EnvdProcess;
let document: { paths: Record<string, Record<string, { operationId?: string }>> };
beforeAll(async () => {
  envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok' });
  document = await (await fetch(`${envd.url}/openapi.json`, { headers: { authorization: 'Bearer tok' } })).json();
});
afterAll(async () => envd?.stop());

describe('a client generated from the OpenAPI document', () => {
  it('compiles a program that calls every route through openapi-fetch, with no casts', async () => {
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
});
