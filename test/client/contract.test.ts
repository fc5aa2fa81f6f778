import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { EnvdClient } from '../../src/client/index.js';
import { generateOpenApiJson } from '../../src/lifecycle/openapi-document.js';
import { startServer, type TestServer } from '../helpers/server.js';

let server: TestServer;
// Everything the calls may create stays in here (as root, mkdir and upload of a path would succeed anywhere).
let dir: string;
beforeAll(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), 'envd-contract-'));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await server.close();
});

/**
 * Every operation of the OpenAPI document, called through the client with every request field it has.
 * A route added on the server without a client method (or a field the client cannot send) fails this test:
 */
const calls: Record<string, (c: EnvdClient) => Promise<unknown>> = {
  'GET /health': (c) => c.lifecycle.health(),
  'POST /init': async (c) => {
    await c.lifecycle.init({ access_token: server.token, envs: {}, default_user: 'root', default_workdir: '/', default_limits: {}, forward_loopback: false, timestamp: new Date().toISOString() });
    // A fork's identity fields, refused (400: the entropy is no base64) before anything of this machine is touched.
    await c.lifecycle.init({ entropy: 'not base64!', hostname: 'contract', machine_id: 'f'.repeat(32), ca_bundle: 'none' });
  },
  'GET /envs': (c) => c.lifecycle.envs(),
  'GET /metrics': (c) => c.lifecycle.metrics(),
  'GET /openapi.json': (c) => c.lifecycle.openApi(),
  // The in-process server's machine refuses the sync (test/helpers/server.ts): a 500 after the fields were sent, nothing frozen.
  'POST /snapshot/prepare': (c) => c.snapshot.prepare({ freeze: 'none', fsfreeze: false, drop_caches: false, max_wait_ms: 0, thaw_after_ms: 1000 }),
  'POST /snapshot/thaw': (c) => c.snapshot.thaw(),
  'POST /commands': (c) => c.commands.start({ cmd: 'cat', args: [], cwd: '/', envs: {}, timeout: 5, user: 'root', stdin: true, pty: { cols: 80, rows: 24 }, limits: {}, ready: { port: 1 }, ready_timeout_ms: 100 }),
  'POST /commands/stream': async (c) => {
    for await (const _ of c.commands.stream({ cmd: 'true', args: [], cwd: '/', envs: {}, timeout: 5, user: 'root', pty: { cols: 80, rows: 24 }, limits: {}, encoding: 'base64', ready: { log: 'x' }, ready_timeout_ms: 100 }));
  },
  'GET /commands/{pid}/stats': (c) => c.commands.stats(1),
  'GET /commands': (c) => c.commands.list({ finished: true }),
  'GET /commands/{pid}/stream': async (c) => {
    for await (const _ of c.commands.attach(1, { from: '0-0', encoding: 'base64' }));
  },
  'GET /commands/{pid}/output': (c) => c.commands.output(1, { stream: 'stdout', from: 0, limit: 1 }),
  'GET /commands/{pid}/wait': (c) => c.commands.wait(1, { timeout_ms: 1 }),
  'GET /commands/{pid}/ready': (c) => c.commands.ready(1, { timeout_ms: 1 }),
  'PUT /services/{name}': (c) =>
    c.services.put('contract', { cmd: 'true', args: [], user: 'root', cwd: '/', envs: {}, restart: 'no', depends_on: [], limits: {}, ready: { port: 1 }, ready_timeout_ms: 100 }),
  'GET /services': (c) => c.services.list(),
  'GET /services/{name}': (c) => c.services.get('contract'),
  'POST /services/{name}/start': (c) => c.services.control('contract', 'start'),
  'POST /services/{name}/stop': (c) => c.services.control('contract', 'stop'),
  'POST /services/{name}/restart': (c) => c.services.control('contract', 'restart'),
  'GET /services/{name}/logs': async (c) => {
    await c.services.logs('contract', { from: '0-0' }).catch(() => undefined);
    for await (const _ of c.services.follow('contract', { from: '0-0', encoding: 'base64' }));
  },
  'DELETE /services/{name}': (c) => c.services.delete('contract'),
  'POST /commands/{pid}/stdin': async (c) => {
    await c.commands.sendStdin(1, 'x').catch(() => undefined);
    await c.commands.sendStdin(1, new Uint8Array([0, 255]));
  },
  'DELETE /commands/{pid}/stdin': (c) => c.commands.closeStdin(1),
  'POST /commands/{pid}/signal': (c) => c.commands.signal(1, 'SIGTERM'),
  'DELETE /commands/{pid}': (c) => c.commands.kill(1),
  'POST /commands/{pid}/resize': (c) => c.commands.resize(1, { cols: 80, rows: 24 }),
  'POST /sessions': (c) => c.sessions.create({ user: 'root', cwd: '/', envs: {}, shell: 'sh', limits: {} }),
  'GET /sessions': (c) => c.sessions.list(),
  'POST /sessions/{id}/commands': (c) => c.sessions.get('00000000-0000-4000-8000-000000000000').run('true', { timeout: 5, stdin: '' }),
  'POST /sessions/{id}/commands/stream': async (c) => {
    for await (const _ of c.sessions.get('00000000-0000-4000-8000-000000000000').stream('true', { timeout: 5, stdin: '', encoding: 'base64' }));
  },
  'DELETE /sessions/{id}': (c) => c.sessions.get('00000000-0000-4000-8000-000000000000').end(),
  'PUT /files/raw': (c) => c.files.upload(`${dir}/x`, 'x', { username: 'root' }),
  'GET /files/raw': (c) => c.files.download(`${dir}/missing`),
  'POST /files/batch': (c) => c.files.writeBatch({ files: [{ path: `${dir}/x`, data: '', encoding: 'utf8' }], username: 'root' }),
  'POST /files': (c) => c.files.write({ path: `${dir}/x`, data: '', encoding: 'utf8', username: 'root' }),
  // files.read sends path and encoding; search.readLines every field (from_line, lines too).
  'GET /files': (c) => c.search.readLines(`${dir}/missing`, { from_line: 1, lines: 1, encoding: 'utf8' }),
  'POST /files/search': async (c) => {
    for await (const _ of c.search.search({ path: `${dir}/missing`, pattern: 'x', literal: true, case: 'smart', include: [], exclude: [], hidden: false, gitignore: true, max_results: 1, max_per_file: 1, context: 0, max_file_bytes: 1, timeout_ms: 1000, username: 'root' }));
  },
  'GET /files/find': (c) => c.search.find({ path: `${dir}/missing`, glob: '*', type: 'file', max_results: 1, gitignore: true, hidden: false, username: 'root' }),
  'POST /files/edit': (c) => c.search.edit({ path: `${dir}/missing`, edits: [{ old: 'a', new: 'b', count: 1 }], expect_sha256: '0'.repeat(64) }),
  'DELETE /files': (c) => c.files.remove(`${dir}/missing`),
  'GET /files/exists': (c) => c.files.exists(`${dir}/missing`),
  'GET /files/info': (c) => c.files.info(`${dir}/missing`, { checksum: 'sha256' }),
  'GET /files/archive': (c) => c.files.downloadArchive(`${dir}/missing`, { format: 'tar.gz', sha256: true }),
  'PUT /files/archive': (c) => c.files.uploadArchive(`${dir}/archive`, new Uint8Array(1024), { mode: 'create', username: 'root' }),
  'GET /files/list': (c) => c.files.list(`${dir}/missing`, { depth: 1 }),
  'POST /files/rename': (c) => c.files.rename(`${dir}/missing`, `${dir}/y`),
  'POST /files/mkdir': (c) => c.files.mkdir(`${dir}/x`, { username: 'root' }),
  'POST /files/watch': async (c) => {
    for await (const _ of c.files.watch({ path: `${dir}/missing`, recursive: true }));
  },
  'GET /ports': (c) => c.ports.list(),
  'GET /ports/watch': async (c) => {
    const abort = new AbortController();
    for await (const _ of c.ports.watch({ signal: abort.signal })) break;
    abort.abort();
  },
};

interface Operation {
  parameters?: { in: string; name: string }[];
  // A JSON body is a `$ref` to components.requestBodies (src/lifecycle/openapi-components.ts).
  requestBody?: { $ref?: string; content?: Record<string, { schema: { properties?: Record<string, unknown>; type?: string } }> };
}

it('the client has a method for every path and method of the OpenAPI document, sending every request field', async () => {
  const document = JSON.parse(await generateOpenApiJson()) as { paths: Record<string, Record<string, Operation>>; components: { requestBodies: Record<string, Operation['requestBody']> } };
  const body = (operation: Operation) => (operation.requestBody?.$ref ? document.components.requestBodies[operation.requestBody.$ref.split('/').pop()!] : operation.requestBody);
  // What the client actually sent, recorded at fetch: method, path, query names, JSON body field names.
  const sent: { method: string; path: string; fields: Set<string> }[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (input: string, init: RequestInit) => {
    const url = new URL(input);
    const fields = new Set(url.searchParams.keys());
    if (typeof init.body === 'string' && init.headers && (init.headers as Record<string, string>)['content-type'] === 'application/json') {
      const body = JSON.parse(init.body) as Record<string, unknown>;
      for (const key of Object.keys(body)) fields.add(key);
    }
    sent.push({ method: init.method ?? 'GET', path: url.pathname, fields });
    return realFetch(input, init);
  }) as typeof fetch;
  const client = new EnvdClient({ url: server.url, token: server.token });
  const missing: string[] = [];
  try {
    for (const [path, methods] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(methods)) {
        const key = `${method.toUpperCase()} ${path}`;
        const call = calls[key];
        if (!call) {
          missing.push(`${key}: no client method`);
          continue;
        }
        sent.length = 0;
        await call(client).catch(() => undefined); // the answer may be an error; what was sent is the point
        const pattern = new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`);
        // A call may send several requests (text and bytes to stdin): the fields of all of them count.
        const matching = sent.filter((s) => s.method === method.toUpperCase() && pattern.test(s.path));
        const request = matching.length === 0 ? undefined : { fields: new Set(matching.flatMap((s) => [...s.fields])) };
        if (!request) {
          missing.push(`${key}: the client sent no such request`);
          continue;
        }
        const wanted = [
          ...(operation.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
          ...Object.keys(body(operation)?.content?.['application/json']?.schema.properties ?? {}),
        ];
        for (const field of wanted) if (!request.fields.has(field)) missing.push(`${key}: request field ${field} is never sent`);
      }
    }
  } finally {
    globalThis.fetch = realFetch;
  }
  expect(missing).toEqual([]);
});
