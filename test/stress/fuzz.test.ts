import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROPERTY_SEED } from '../helpers/output-integrity.js';
import { MiB, report, settleFds, startStressEnvd, type StressEnvd } from './harness.js';

/** Cases per route: a fixed seed makes CI repeat the same ones; ENVD_PROPERTY_SEED and ENVD_FUZZ_RUNS explore others. */
const RUNS = Number(process.env.ENVD_FUZZ_RUNS ?? 40);

// Generated bad input for every route of the OpenAPI document. Paths that a
// route could destroy stay inside envd's scratch directory; read-only routes
// also get the nasty ones (/proc/self/mem, /dev/zero, traversal).

let target: StressEnvd;
let routes: { method: string; path: string; op: any }[] = [];
const statuses = new Map<number, number>();
let tried = 0;

beforeAll(async () => {
  target = await startStressEnvd(['--max-output-bytes', String(MiB)]);
  const doc = await (await target.call('GET', '/openapi.json')).json();
  for (const [path, ops] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(ops)) {
      if (['get', 'post', 'put', 'delete', 'patch'].includes(method)) routes.push({ method: method.toUpperCase(), path, op });
    }
  }
});
afterAll(async () => {
  // Leave no command behind that the fuzzer started in the background.
  const listed = await (await target.call('GET', '/commands')).json().catch(() => ({ processes: [] }));
  for (const p of listed.processes ?? []) await target.call('DELETE', `/commands/${p.pid}`);
  report('fuzz', { requests: tried, statuses: JSON.stringify(Object.fromEntries(statuses)) });
  await target?.stop();
});

const DESTRUCTIVE = /^(PUT|POST|DELETE) \/files/;
const weirdText = fc.oneof(
  fc.constantFrom('', ' ', '..', '../etc/passwd', 'relative/path', '/proc/self/mem', '/dev/zero', '/etc/passwd', '/', '//', '/a\u0000b', '\u202e\u0301', '🦄'.repeat(50), '%00', '-1', '0', '1e99', '0x10', 'NaN', 'true', 'null', '[]', '{}'),
  fc.string({ maxLength: 64 }),
  fc.string({ unit: 'grapheme', maxLength: 32 }),
  // Long, but under Node's 16 KiB header limit (the 431 case is tested once on its own).
  fc.constant('x'.repeat(8_000)),
);
const weirdPid = fc.oneof(fc.constantFrom('-1', '0', '1e99', '0x10', 'abc', '1.5', '99999999', '4294967296', '%20', '1;2', '١', '00001'), fc.integer().map(String));

function asQueryText(value: unknown): string {
  return typeof value === 'string' ? value : (JSON.stringify(value) ?? 'undefined');
}

function scratchPath(): fc.Arbitrary<string> {
  const name = fc.string({ minLength: 1, maxLength: 12 }).filter((s) => !s.includes('/') && s !== '.' && s !== '..');
  return fc.array(name, { minLength: 1, maxLength: 3 }).map((parts) => `${target.dir}/${parts.join('/')}`);
}

function valueFor(destructive: boolean): fc.Arbitrary<unknown> {
  return fc.oneof(
    destructive ? scratchPath() : fc.oneof(scratchPath(), weirdText),
    destructive ? fc.constantFrom('relative', '/a\u0000b', '', '../x') : weirdText,
    fc.integer(), fc.double(), fc.boolean(), fc.constant(null),
    fc.array(fc.integer(), { maxLength: 3 }), fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 }), { maxKeys: 3 }),
  );
}

function bodyFor(op: any, destructive: boolean): fc.Arbitrary<{ text: string; type: string } | undefined> {
  const schema = op.requestBody?.content?.['application/json']?.schema;
  const props = Object.keys(schema?.properties ?? {});
  const shaped = fc.record(Object.fromEntries(props.map((p) => [p, valueFor(destructive)])), { requiredKeys: [] });
  return fc.oneof(
    fc.constant(undefined),
    shaped.map((b) => ({ text: JSON.stringify(b), type: 'application/json' })),
    shaped.map((b) => ({ text: JSON.stringify({ ...b, extra: 'field', __proto__x: 1 }), type: 'application/json' })),
    (destructive ? fc.constant({}) : fc.jsonValue()).map((v) => ({ text: JSON.stringify(v), type: 'application/json' })),
    fc.constantFrom('{', '{"a":', 'nul', '[1,2', '\u0000', '{"cmd": "true"}}').map((text) => ({ text, type: 'application/json' })),
    fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x').map((type) => ({ text: 'a=b', type })),
  );
}

describe('generated bad input', () => {
  it('answers every route with a 4xx { message } or a success, never a 5xx or a hang', async () => {
    expect(routes.length).toBeGreaterThan(15);
    // Opened once and kept for good, so before the count: user-path.ts's shared descriptor of `/` (the first
    // walk) and the holder spawner's two sockets (the first command).
    await (await target.call('GET', '/files/info?path=/')).body?.cancel();
    await (await target.call('POST', '/commands', { cmd: 'true' })).body?.cancel();
    const fdsBefore = target.fds();
    for (const route of routes) {
      const key = `${route.method} ${route.path}`;
      if (key === 'POST /init') continue; // covered below: it rotates the token the fuzzer uses
      const destructive = DESTRUCTIVE.test(key);
      const params: { name: string; in: string }[] = route.op.parameters ?? [];
      const query = fc.record(Object.fromEntries(params.filter((p) => p.in === 'query').map((p) => [p.name, valueFor(destructive).map(asQueryText)])), { requiredKeys: [] });
      await fc.assert(
        fc.asyncProperty(weirdPid, query, bodyFor(route.op, destructive), async (pid, q, body) => {
          const url = route.path.replace('{pid}', encodeURIComponent(pid)) + '?' + new URLSearchParams(q as Record<string, string>).toString();
          const response = await target.call(route.method, url, undefined, {
            body: body && route.method !== 'GET' ? body.text : undefined,
            headers: body && route.method !== 'GET' ? { 'content-type': body.type } : {},
            signal: AbortSignal.timeout(20_000),
          });
          tried++;
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
          const type = response.headers.get('content-type') ?? '';
          if (response.status >= 400) {
            const parsed = await response.json();
            expect(typeof parsed.message, `${key} ${url} -> ${response.status}`).toBe('string');
          } else {
            await response.body?.cancel();
            if (!type.includes('event-stream') && !type.includes('octet-stream')) expect(response.status).toBeLessThan(300);
          }
          expect(response.status, `${key} ${url} ${body?.text?.slice(0, 200)}`).toBeLessThan(500);
        }),
        { numRuns: RUNS, seed: PROPERTY_SEED + routes.indexOf(route) },
      );
    }
    // Oversized JSON: 413 on every JSON route, from Content-Length before the body is read.
    for (const route of routes.filter((r) => r.op.requestBody?.content?.['application/json'])) {
      const response = await target.declareBody(route.method, route.path.replace('{pid}', '1'), 11 * MiB);
      tried++;
      expect(response.status, `${route.method} ${route.path}`).toBe(413);
      expect(typeof response.json.message).toBe('string');
    }
    // Sessions and services the fuzzer made are meant to live on (each holds its holder link): ended first.
    for (const { id } of ((await (await target.call('GET', '/sessions')).json()) as { sessions: { id: string }[] }).sessions) await target.call('DELETE', `/sessions/${id}`);
    for (const { name } of ((await (await target.call('GET', '/services')).json()) as { services: { name: string }[] }).services) await target.call('DELETE', `/services/${encodeURIComponent(name)}`);
    const fdsAfter = await settleFds(target, fdsBefore, 3);
    report('fuzz fds', { before: fdsBefore, after: fdsAfter });
    expect(fdsAfter).toBeLessThanOrEqual(fdsBefore + 3);
    expect([...statuses.keys()].filter((s) => s >= 500)).toEqual([]);
  }, 300_000);

  it('answers a request line over the header limit with 431 { message }', async () => {
    const response = await target.call('GET', `/files/info?path=/${'x'.repeat(70_000)}`);
    tried++;
    expect(response.status).toBe(431);
    expect(typeof (await response.json()).message).toBe('string');
  });

  it('answers malformed /init bodies with 400 and keeps the token', async () => {
    const bad = fc.record({
      access_token: fc.oneof(fc.integer(), fc.constant(''), fc.constant(null), fc.array(fc.string())),
      envs: fc.oneof(fc.string(), fc.dictionary(fc.string(), fc.integer(), { minKeys: 1 })),
      default_user: fc.oneof(fc.constant('no-such-user-xyz'), fc.integer()),
      default_workdir: fc.constantFrom('relative', '/no/such/dir', '/etc/passwd'),
      timestamp: fc.oneof(fc.constantFrom('yesterday', '2024-13-45T00:00:00Z', ''), fc.integer()),
    }, { requiredKeys: [] }).filter((b) => Object.keys(b).length > 0);
    await fc.assert(
      fc.asyncProperty(bad, async (body) => {
        const response = await target.call('POST', '/init', body, { signal: AbortSignal.timeout(10_000) });
        tried++;
        expect(response.status, JSON.stringify(body)).toBe(400);
        expect(typeof (await response.json()).message).toBe('string');
      }),
      { numRuns: 60, seed: PROPERTY_SEED },
    );
    expect((await target.call('GET', '/envs')).status).toBe(200);
  });
});
