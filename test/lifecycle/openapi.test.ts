import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { generatedOpenApi } from '../../src/lifecycle/openapi.js';
import { InitBody } from '../../src/lifecycle/schemas.js';
import { createLogger } from '../../src/logger.js';
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';
import { makeEnvdDirs, startServer, testConfig, type TestServer } from '../helpers/server.js';
import { missingFromDocument, registeredRoutes } from './registered-routes.js';

type Operation = { summary?: string; security?: unknown[]; parameters?: { in: string; name: string }[]; requestBody?: any; responses: Record<string, any> };
type Document = { openapi: string; info: { title: string; version: string }; paths: Record<string, Record<string, Operation>>; components: any; security: unknown[] };

const LIFECYCLE = ['GET /health', 'POST /init', 'GET /envs', 'GET /metrics', 'GET /openapi.json', 'POST /snapshot/prepare', 'POST /snapshot/thaw'];

// The bundle serves the document build.mjs generated; the in-process app (from
// the sources) generates it from its routes as they register. Both are checked.
let bundle: EnvdProcess;
let server: TestServer;
let built: App | undefined;
beforeAll(async () => {
  [bundle, server] = await Promise.all([startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok' }), startServer({}, { setClock: async () => {} })]);
});
afterAll(async () => {
  await bundle?.stop();
  await server?.close();
});
afterEach(async () => {
  await built?.close();
  built = undefined;
});

/** The document the built envd serves. */
async function fetchDocument(): Promise<{ server: TestServer; document: Document }> {
  const response = await fetch(`${bundle.url}/openapi.json`, { headers: { authorization: 'Bearer tok' } });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
  return { server, document: (await response.json()) as Document };
}

/** A schema with its `$ref` (to components.schemas or components.requestBodies) followed. */
const deref = (document: Document, value: any): any => {
  const ref = value?.$ref as string | undefined;
  if (ref === undefined) return value;
  const [, kind, name] = /^#\/components\/(\w+)\/(.+)$/.exec(ref)!;
  return deref(document, document.components[kind!][name!]);
};
const jsonBody = (document: Document, operation: Operation) => deref(document, deref(document, operation.requestBody).content['application/json'].schema);

const operations = (document: Document) =>
  Object.entries(document.paths).flatMap(([path, methods]) => Object.entries(methods).map(([method, operation]) => ({ key: `${method.toUpperCase()} ${path}`, path, operation })));

describe('GET /openapi.json', () => {
  it('is an OpenAPI 3 document with info, paths and the bearer scheme', async () => {
    const { document } = await fetchDocument();
    expect(document.openapi).toMatch(/^3\.\d+\.\d+$/);
    expect(document.info).toEqual(expect.objectContaining({ title: 'envd', version: expect.stringMatching(/^\d+\.\d+\.\d+/) }));
    expect(document.components.securitySchemes.bearer).toEqual({ type: 'http', scheme: 'bearer' });
    expect(document.security).toEqual([{ bearer: [] }]);
    for (const { key, path, operation } of operations(document)) {
      expect(path, key).toMatch(/^\/[^:]*$/);
      expect(['get', 'put', 'post', 'delete', 'patch', 'head', 'options']).toContain(key.split(' ')[0]!.toLowerCase());
      for (const response of Object.values(operation.responses)) expect(typeof response.description, key).toBe('string');
    }
  });

  it('describes every route the app registered, and nothing it did not', async () => {
    const { server, document } = await fetchDocument();
    const registered = registeredRoutes(server.app).map(({ method, path }) => `${method} ${path}`);
    for (const route of LIFECYCLE) expect(registered).toContain(route);
    expect(missingFromDocument(server.app, document)).toEqual([]);
    expect(operations(document).map(({ key }) => key).sort()).toEqual([...registered].sort());
  });

  it('notices a route that is left out of the document (the check above is not vacuous)', async () => {
    const dirs = makeEnvdDirs();
    onTestFinished(() => dirs.remove());
    built = await buildApp({ config: testConfig({ accessToken: 'tok', stateDir: dirs.stateDir, spoolDir: dirs.spoolDir }), logger: createLogger('silent'), setClock: async () => {}, openApi: generatedOpenApi });
    await built.register(
      async (plugin) => {
        plugin.get('/:id', { schema: { hide: true } }, async () => ({}));
        plugin.post('/', { schema: { hide: true } }, async () => ({}));
      },
      { prefix: '/undocumented' },
    );
    await built.ready();
    const document = built.swagger() as unknown as Document;
    expect(missingFromDocument(built, document).sort()).toEqual(['GET /undocumented/{id}', 'POST /undocumented']);
  });

  it('gives every operation a success response, the {message} error shape, and its path parameters', async () => {
    const { document } = await fetchDocument();
    for (const { key, path, operation } of operations(document)) {
      const statuses = Object.keys(operation.responses);
      expect(statuses.some((status) => /^2/.test(status)), key).toBe(true);
      const errors = statuses.filter((status) => /^[45]/.test(status));
      expect(errors, key).toContain('500');
      for (const status of errors) {
        const schema = operation.responses[status].content?.['application/json']?.schema;
        expect(schema, `${key} ${status}`).toEqual({ $ref: '#/components/schemas/Error' });
      }
      for (const [, name] of path.matchAll(/\{(\w+)\}/g)) {
        expect(operation.parameters?.some((p) => p.in === 'path' && p.name === name), `${key} declares ${name}`).toBe(true);
      }
      if (operation.requestBody || operation.parameters?.length) expect(statuses, key).toContain('400');
    }
  });

  it('shows /health as public, /init as open-or-bearer, and every other route as bearer-only with a 401', async () => {
    const { document } = await fetchDocument();
    for (const { key, operation } of operations(document)) {
      if (key === 'GET /health') {
        expect(operation.security).toEqual([]);
        expect(operation.responses['401']).toBeUndefined();
      } else if (key === 'POST /init') {
        expect(operation.security).toEqual([{ bearer: [] }, {}]);
        expect(operation.responses['401']).toBeDefined();
      } else {
        // No operation-level security: the document's global `bearer` applies.
        expect(operation.security, key).toBeUndefined();
        expect(operation.responses['401'], key).toBeDefined();
      }
    }
  });

  it('documents the lifecycle routes fully: summaries, the /init body, typed answers', async () => {
    const { document } = await fetchDocument();
    for (const key of LIFECYCLE) {
      const [method, path] = key.split(' ') as [string, string];
      const operation = document.paths[path]![method.toLowerCase()]!;
      expect(operation.summary, key).toEqual(expect.any(String));
      const success = Object.entries(operation.responses).find(([status]) => status.startsWith('2'))!;
      if (success[0] !== '204') expect(success[1].content['application/json'].schema, key).toBeDefined();
    }
    const init = document.paths['/init']!.post!;
    expect(init.responses['204']).toBeDefined();
    const body = jsonBody(document, init);
    expect(Object.keys(body.properties).sort()).toEqual(['access_token', 'ca_bundle', 'default_limits', 'default_user', 'default_workdir', 'entropy', 'envs', 'forward_loopback', 'hostname', 'machine_id', 'timestamp']);
    expect(body.additionalProperties).toBe(false);
    expect(body.required ?? []).toEqual([]);
    const metrics = deref(document, document.paths['/metrics']!.get!.responses['200'].content['application/json'].schema);
    expect(metrics.properties.cpu_used_pct.type).toBe('number');
    expect(metrics.properties.processes_tracked.type).toBe('integer');
  });

  it('is the same document the app generates from its route schemas, served in process too', async () => {
    const { server, document } = await fetchDocument();
    expect(document).toEqual(JSON.parse(generatedOpenApi.json(server.app)));
    expect(await (await server.call('GET', '/openapi.json')).json()).toEqual(document);
    // The schema that validates /init bodies is the one documented.
    const body = jsonBody(document, document.paths['/init']!.post!);
    expect(body.properties.access_token).toEqual(expect.objectContaining({ type: 'string', minLength: InitBody.properties.access_token.minLength, maxLength: InitBody.properties.access_token.maxLength }));
    expect(body.properties.timestamp.pattern).toBe(InitBody.properties.timestamp.pattern);
  });
});

describe('the OpenAPI document, for client generators', () => {
  it('names every operation with a unique verb-noun operationId and one of the four tags', async () => {
    const { document } = await fetchDocument();
    const ids = operations(document).map(({ key, operation }) => {
      const { operationId, tags } = operation as Operation & { operationId?: string; tags?: string[] };
      expect(operationId, `${key} has no operationId (src/lifecycle/openapi-operations.ts)`).toMatch(/^[a-z]+[A-Z][A-Za-z]*$/);
      expect(tags, key).toHaveLength(1);
      expect(['lifecycle', 'commands', 'sessions', 'files', 'ports', 'services']).toContain(tags![0]);
      return operationId;
    });
    expect(new Set(ids).size).toBe(ids.length);
    expect((document as any).servers).toEqual([expect.objectContaining({ url: '/' })]);
    expect((document as any).tags.map((tag: { name: string }) => tag.name)).toEqual(['lifecycle', 'commands', 'sessions', 'files', 'ports', 'services']);
    expect(ids).toEqual(expect.arrayContaining(['runCommand', 'uploadFile', 'downloadFile', 'watchDirectory', 'attachCommand']));
  });

  it('names its shared schemas once, as components, and refers to them: the error shape is not inlined', async () => {
    const { document } = await fetchDocument();
    const schemas = document.components.schemas;
    for (const name of ['Error', 'CommandResult', 'EntryInfo', 'ExitEvent', 'ProcessInfo', 'Limits', 'WatchChangeEvent']) expect(schemas[name], name).toBeDefined();
    expect(schemas.Error).toEqual(expect.objectContaining({ type: 'object', required: ['message'], properties: { message: expect.objectContaining({ type: 'string' }) } }));
    const text = JSON.stringify(document.paths);
    expect(text).not.toContain('"required":["message"]');
    expect(text.split('"#/components/schemas/Error"').length - 1).toBeGreaterThan(100);
    expect(text).not.toContain('"required":["name","path","type"');
  });

  it('declares the raw uploads and downloads as binary, with the headers they read and set', async () => {
    const { document } = await fetchDocument();
    const binary = { type: 'string', format: 'binary' };
    const upload = document.paths['/files/raw']!.put!.requestBody.content;
    expect(upload['application/octet-stream'].schema).toEqual(expect.objectContaining(binary));
    const extract = document.paths['/files/archive']!.put!.requestBody.content;
    for (const type of ['application/x-tar', 'application/gzip', 'application/octet-stream']) expect(extract[type].schema, type).toEqual(expect.objectContaining(binary));
    const download = document.paths['/files/raw']!.get!;
    expect(download.responses['200'].content['application/octet-stream'].schema).toEqual(expect.objectContaining(binary));
    expect(download.responses['206'].headers['Content-Range']).toBeDefined();
    expect(download.responses['416'].headers['Content-Range']).toBeDefined();
    expect(download.parameters).toContainEqual(expect.objectContaining({ in: 'header', name: 'Range' }));
    const output = document.paths['/commands/{pid}/output']!.get!;
    expect(Object.keys(output.responses['200'].headers)).toEqual(expect.arrayContaining(['x-envd-kept-bytes', 'x-envd-written-bytes', 'Content-Range']));
    expect(output.responses['200'].content['application/octet-stream'].schema).toEqual(expect.objectContaining(binary));
    expect(document.paths['/commands/{pid}/stream']!.get!.parameters).toContainEqual(expect.objectContaining({ in: 'header', name: 'Last-Event-ID' }));
    expect(document.paths['/files/archive']!.get!.responses['200'].headers['Content-Disposition']).toBeDefined();
  });

  it('declares each stream\'s events as data: x-events maps event names to component schemas', async () => {
    const { document } = await fetchDocument();
    const events = (key: string) => {
      const [method, path] = key.split(' ') as [string, string];
      const media = document.paths[path]![method.toLowerCase()]!.responses['200'].content['text/event-stream'];
      expect(media.schema.description, key).toMatch(/Last-Event-ID|no `id:`/);
      return media['x-events'];
    };
    const command = { start: 'StartEvent', ready: 'ReadyEvent', stdout: 'OutputEvent', stderr: 'OutputEvent', truncated: 'TruncatedEvent', exit: 'ExitEvent', error: 'Error' };
    for (const key of ['POST /commands/stream', 'GET /commands/{pid}/stream']) {
      expect(events(key), key).toEqual(Object.fromEntries(Object.entries(command).map(([event, name]) => [event, { $ref: `#/components/schemas/${name}` }])));
    }
    expect(events('POST /files/watch')).toEqual({ ready: { $ref: '#/components/schemas/WatchReadyEvent' }, change: { $ref: '#/components/schemas/WatchChangeEvent' }, error: { $ref: '#/components/schemas/Error' } });
    expect(document.components.schemas.ExitEvent.properties.reason.enum).toContain('oom_killed');
    expect(document.components.schemas.TruncatedEvent.required).toEqual(['stream', 'bytes']);
  });

  it('declares the statuses file and command routes answer beyond their schemas (issue 43\'s list)', async () => {
    const { document } = await fetchDocument();
    const statuses = (key: string) => {
      const [method, path] = key.split(' ') as [string, string];
      return Object.keys(document.paths[path]![method.toLowerCase()]!.responses);
    };
    for (const key of ['POST /files/mkdir', 'PUT /files/raw', 'POST /files', 'POST /files/batch', 'DELETE /files', 'PUT /files/archive']) expect(statuses(key), key).toContain('403');
    for (const key of ['POST /files', 'PUT /files/raw']) expect(statuses(key), key).toContain('404');
    for (const key of ['POST /init', 'POST /files/mkdir', 'POST /files/rename', 'POST /files/watch']) expect(statuses(key), key).toContain('413');
    for (const key of ['PUT /files/raw', 'PUT /files/archive', 'GET /commands/{pid}/wait']) expect(statuses(key), key).toContain('408');
    for (const { key } of operations(document)) expect(statuses(key), key).toContain('503');
    for (const { key } of operations(document)) expect(statuses(key).filter((status) => /X/i.test(status)), `${key} declares statuses one by one`).toEqual([]);
    for (const key of ['POST /files/edit', 'POST /files/search', 'GET /files/find']) expect(statuses(key), key).toEqual(expect.arrayContaining(['400', '403', '404']));
    expect(statuses('POST /files/edit')).toEqual(expect.arrayContaining(['409', '413', '507']));
    // Work that takes its share of the memory budget says when to retry (src/memory-budget.ts).
    const budgeted = ['POST /commands/stream', 'GET /commands/{pid}/stream', 'POST /sessions/{id}/commands/stream', 'GET /services/{name}/logs', 'PUT /files/raw', 'GET /files/raw', 'GET /files/archive', 'PUT /files/archive', 'POST /files/watch', 'GET /ports/watch'];
    for (const { key, path, operation } of operations(document)) {
      expect(Object.keys(operation.responses['503'].headers ?? {}), `${key} (${path})`).toEqual(budgeted.includes(key) ? ['Retry-After'] : []);
    }
  });
});
