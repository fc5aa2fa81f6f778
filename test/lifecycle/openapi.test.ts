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

const LIFECYCLE = ['GET /health', 'POST /init', 'GET /envs', 'GET /metrics', 'GET /openapi.json'];

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
        expect(schema?.properties?.message?.type, `${key} ${status}`).toBe('string');
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
    const body = init.requestBody.content['application/json'].schema;
    expect(Object.keys(body.properties).sort()).toEqual(['access_token', 'default_limits', 'default_user', 'default_workdir', 'envs', 'timestamp']);
    expect(body.additionalProperties).toBe(false);
    expect(body.required ?? []).toEqual([]);
    const metrics = document.paths['/metrics']!.get!.responses['200'].content['application/json'].schema;
    expect(metrics.properties.cpu_used_pct.type).toBe('number');
    expect(metrics.properties.processes_tracked.type).toBe('integer');
  });

  it('is the same document the app generates from its route schemas, served in process too', async () => {
    const { server, document } = await fetchDocument();
    expect(document).toEqual(JSON.parse(JSON.stringify(server.app.swagger())));
    expect(await (await server.call('GET', '/openapi.json')).json()).toEqual(document);
    // The schema that validates /init bodies is the one documented.
    const body = document.paths['/init']!.post!.requestBody.content['application/json'].schema;
    expect(body.properties.access_token).toEqual(expect.objectContaining({ type: 'string', minLength: InitBody.properties.access_token.minLength, maxLength: InitBody.properties.access_token.maxLength }));
    expect(body.properties.timestamp.pattern).toBe(InitBody.properties.timestamp.pattern);
  });
});
