import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startServer, type TestServer } from '../helpers/server.js';

const dir = mkdtempSync(join(tmpdir(), 'envd-init-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** A clock setter that records what it was asked to do: these tests run as root and must never move the real clock. */
function fakeClock() {
  const calls: number[] = [];
  return { calls, setClock: async (ms: number) => void calls.push(ms) };
}

const start = async (token?: string) => {
  const clock = fakeClock();
  server = await startServer({ accessToken: token }, { setClock: clock.setClock });
  return { server, clock };
};

const post = (s: TestServer, body: unknown, token?: string) =>
  fetch(`${s.url}/init`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
const get = (s: TestServer, path: string, token?: string) => fetch(`${s.url}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {} });

describe('POST /init and the token', () => {
  it('is open while no token is set, and every other route answers 401 "not initialised" until then', async () => {
    const { server } = await start(undefined);
    for (const path of ['/envs', '/metrics', '/openapi.json', '/commands']) {
      const response = await get(server, path, 'anything');
      expect(response.status).toBe(401);
      expect((await response.json()).message).toMatch(/not initialised/);
    }
    expect((await post(server, {})).status).toBe(204);
    // An empty /init sets no token: still not initialised.
    expect((await get(server, '/envs', 'anything')).status).toBe(401);
  });

  it('takes a first token from an unauthenticated /init, then requires that token for /init too', async () => {
    const { server } = await start(undefined);
    expect((await post(server, { access_token: 'first-token' })).status).toBe(204);
    expect((await get(server, '/envs', 'first-token')).status).toBe(200);
    const again = await post(server, { envs: { A: '1' } });
    expect(again.status).toBe(401);
    expect((await again.json()).message).toMatch(/Authorization/);
    expect((await post(server, { envs: { A: '1' } }, 'wrong')).status).toBe(401);
    expect((await post(server, { envs: { A: '1' } }, 'first-token')).status).toBe(204);
  });

  it('rotates the token: the old one is refused at once and the new one works', async () => {
    const { server } = await start('old-token');
    expect((await post(server, { access_token: 'new-token' }, 'old-token')).status).toBe(204);
    const old = await get(server, '/envs', 'old-token');
    expect(old.status).toBe(401);
    expect((await old.json()).message).toMatch(/invalid access token/);
    expect((await post(server, { access_token: 'x' }, 'old-token')).status).toBe(401);
    expect((await get(server, '/envs', 'new-token')).status).toBe(200);
  });

  it('refuses an empty token or one that could not be sent back in a Bearer header, changing nothing', async () => {
    const { server } = await start('tok');
    for (const access_token of ['', 'has space', 'tab\there', 'ünïcode', 'x'.repeat(4097)]) {
      const response = await post(server, { access_token }, 'tok');
      expect(response.status).toBe(400);
      expect((await response.json()).message).toMatch(/access_token/);
    }
    expect((await post(server, { access_token: 'y'.repeat(4096) }, 'tok')).status).toBe(204);
    expect((await get(server, '/envs', 'y'.repeat(4096))).status).toBe(200);
  });

  it('never writes the token into its logs, even at trace level', async () => {
    server = await startServer({ accessToken: undefined, logLevel: 'trace' }, { setClock: fakeClock().setClock });
    const secret = 'secret-token-0123456789abcdef';
    expect((await post(server, { access_token: secret, envs: { A: '1' } })).status).toBe(204);
    expect((await post(server, { access_token: `${secret}-2` }, secret)).status).toBe(204);
    await get(server, '/envs', `${secret}-2`);
    expect(server.logs.some((line) => JSON.parse(line).msg === 'initialised')).toBe(true);
    expect(server.logs.join('\n')).not.toContain(secret);
  });
});

describe('POST /init and the sandbox envs and defaults', () => {
  it('replaces the envs instead of merging them, and GET /envs shows the current set', async () => {
    const { server } = await start('tok');
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({});
    expect((await post(server, { envs: { A: '1', B: 'two words', EMPTY: '' } }, 'tok')).status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ A: '1', B: 'two words', EMPTY: '' });
    expect((await post(server, { envs: { C: '3' } }, 'tok')).status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ C: '3' });
    // Without `envs`, the set is kept.
    expect((await post(server, { default_user: 'root' }, 'tok')).status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ C: '3' });
    expect((await post(server, { envs: {} }, 'tok')).status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({});
  });

  it('never shows the token in GET /envs', async () => {
    const { server } = await start('tok');
    await post(server, { access_token: 'rotated-secret', envs: { A: '1' } }, 'tok');
    const text = await (await get(server, '/envs', 'rotated-secret')).text();
    expect(JSON.parse(text)).toEqual({ A: '1' });
    expect(text).not.toContain('rotated-secret');
  });

  it('refuses envs that a process environment cannot hold, and non-string values', async () => {
    const { server } = await start('tok');
    for (const envs of [{ '': 'x' }, { 'A=B': 'x' }, { A: 'nul\0byte' }, { A: 1 }, { A: null }, ['A']]) {
      const response = await post(server, { envs }, 'tok');
      expect(response.status, JSON.stringify(envs)).toBe(400);
      expect((await response.json()).message).toMatch(/envs/);
    }
  });

  it('sets default_user and default_workdir', async () => {
    const { server } = await start('tok');
    const work = join(dir, 'work');
    mkdirSync(work, { recursive: true });
    expect((await post(server, { default_user: 'nobody', default_workdir: work }, 'tok')).status).toBe(204);
    expect(server.app.envd.state.defaultUser).toBe('nobody');
    expect(server.app.envd.state.defaultWorkdir).toBe(work);
  });

  it('answers 400 for an unknown default_user, a missing, relative or non-directory default_workdir, and unknown fields', async () => {
    const { server } = await start('tok');
    const file = join(dir, 'a-file');
    writeFileSync(file, 'x');
    const cases: [unknown, RegExp][] = [
      [{ default_user: 'no-such-user-xyz' }, /default_user: unknown user "no-such-user-xyz"/],
      [{ default_workdir: join(dir, 'missing') }, /default_workdir: .*missing cannot be used \(ENOENT\)/],
      [{ default_workdir: 'relative/dir' }, /default_workdir: must be an absolute path/],
      [{ default_workdir: file }, /default_workdir: .* is not a directory/],
      [{ timestamp: 'yesterday' }, /timestamp/],
      [{ timestamp: '2026-13-01T00:00:00Z' }, /timestamp/],
      [{ timestamp: 1700000000 }, /timestamp/],
      [{ surprise: true }, /additional properties|surprise/],
    ];
    for (const [body, message] of cases) {
      const response = await post(server, body, 'tok');
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect((await response.json()).message).toMatch(message);
    }
  });

  it('changes nothing at all when one field of a combined body is bad', async () => {
    const { server, clock } = await start('tok');
    const work = join(dir, 'kept');
    mkdirSync(work, { recursive: true });
    expect((await post(server, { envs: { KEEP: '1' }, default_user: 'root', default_workdir: work }, 'tok')).status).toBe(204);
    const everything = { access_token: 'new', envs: { LOST: '1' }, default_workdir: dir, timestamp: '2000-01-01T00:00:00Z' };
    for (const bad of [{ default_user: 'no-such-user-xyz' }, { default_workdir: join(dir, 'missing') }, { timestamp: '2026-01-01T25:00:00Z' }]) {
      const response = await post(server, { ...everything, ...bad }, 'tok');
      expect(response.status, JSON.stringify(bad)).toBe(400);
    }
    expect((await get(server, '/envs', 'new')).status).toBe(401);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ KEEP: '1' });
    expect(server.app.envd.state.defaultUser).toBe('root');
    expect(server.app.envd.state.defaultWorkdir).toBe(work);
    expect(clock.calls).toEqual([]);
  });

  it('keeps its own copy of the envs', async () => {
    const { server } = await start('tok');
    await post(server, { envs: { A: '1' } }, 'tok');
    const first = server.app.envd.state.envs;
    await post(server, { envs: { A: '1' } }, 'tok');
    expect(server.app.envd.state.envs).not.toBe(first);
    expect(server.app.envd.state.envs).toEqual({ A: '1' });
  });
});

describe('POST /init bodies', () => {
  it('treats a request with no body like {} (changes nothing), but refuses a JSON body that is not an object', async () => {
    const { server } = await start('tok');
    await post(server, { envs: { A: '1' } }, 'tok');
    const empty = await fetch(`${server.url}/init`, { method: 'POST', headers: { authorization: 'Bearer tok' } });
    expect(empty.status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ A: '1' });
    for (const body of [null, [], 'text', 42]) {
      const response = await post(server, body, 'tok');
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect((await response.json()).message).toMatch(/body/);
    }
  });
});

describe('POST /init repeated and concurrent', () => {
  it('is idempotent: the same body twice leaves the same state', async () => {
    const { server } = await start(undefined);
    const body = { access_token: 'tok', envs: { A: '1' }, default_user: 'root', default_workdir: dir };
    expect((await post(server, body)).status).toBe(204);
    expect((await post(server, body, 'tok')).status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ A: '1' });
    expect(server.app.envd.state.defaultWorkdir).toBe(dir);
  });

  it('applies 20 concurrent calls each whole: envs and workdir always come from one call', async () => {
    const { server } = await start('tok');
    const dirs = Array.from({ length: 20 }, (_, i) => {
      const path = join(dir, `concurrent-${i}`);
      mkdirSync(path, { recursive: true });
      return path;
    });
    const responses = await Promise.all(
      dirs.map((path, i) => post(server, { access_token: 'tok', envs: { CALL: String(i), ALSO: String(i) }, default_workdir: path, default_user: i % 2 ? 'root' : 'nobody' }, 'tok')),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(20).fill(204));
    const envs = await (await get(server, '/envs', 'tok')).json();
    const winner = Number(envs.CALL);
    expect(envs).toEqual({ CALL: String(winner), ALSO: String(winner) });
    expect(server.app.envd.state.defaultWorkdir).toBe(dirs[winner]);
    expect(server.app.envd.state.defaultUser).toBe(winner % 2 ? 'root' : 'nobody');
  });

  it('ends concurrent rotations with exactly one working token, from a call that succeeded, with that call\'s envs', async () => {
    const { server } = await start('initial');
    const tokens = Array.from({ length: 20 }, (_, i) => `token-${i}`);
    const statuses = await Promise.all(tokens.map(async (token, i) => (await post(server, { access_token: token, envs: { CALL: String(i) } }, 'initial')).status));
    for (const status of statuses) expect([204, 401]).toContain(status);
    const working: number[] = [];
    for (const [i, token] of tokens.entries()) if ((await get(server, '/envs', token)).status === 200) working.push(i);
    expect(working).toHaveLength(1);
    expect(statuses[working[0]!]).toBe(204);
    expect(await (await get(server, '/envs', tokens[working[0]!])).json()).toEqual({ CALL: String(working[0]) });
    expect((await get(server, '/envs', 'initial')).status).toBe(401);
  });
});

describe('POST /init and the clock', () => {
  it('sets the clock to the host timestamp when the guest is far behind', async () => {
    const { server, clock } = await start('tok');
    const host = Date.now() + 3_600_000;
    expect((await post(server, { timestamp: new Date(host).toISOString() }, 'tok')).status).toBe(204);
    expect(clock.calls).toHaveLength(1);
    expect(clock.calls[0]).toBeGreaterThanOrEqual(host);
    expect(clock.calls[0]! - host).toBeLessThan(5_000);
  });

  it('sets the clock when the guest is far ahead, and accepts a timestamp with an offset', async () => {
    const { server, clock } = await start('tok');
    expect((await post(server, { timestamp: '2001-02-03T04:05:06.789+02:00' }, 'tok')).status).toBe(204);
    expect(clock.calls).toHaveLength(1);
    expect(Math.floor(clock.calls[0]! / 1000)).toBeLessThan(Date.UTC(2001, 1, 3, 2, 5, 6, 789) / 1000 + 5);
    expect(clock.calls[0]).toBeGreaterThanOrEqual(Date.UTC(2001, 1, 3, 2, 5, 6, 789));
  });

  it('leaves a clock that is already right (here: 1 s ahead of the host, within the 5 s allowance) alone', async () => {
    const { server, clock } = await start('tok');
    expect((await post(server, { timestamp: new Date(Date.now() - 1_000).toISOString() }, 'tok')).status).toBe(204);
    expect(clock.calls).toEqual([]);
  });

  it('ignores a timestamp older than the last applied one', async () => {
    const { server, clock } = await start('tok');
    const host = Date.now() + 3_600_000;
    await post(server, { timestamp: new Date(host).toISOString() }, 'tok');
    expect((await post(server, { timestamp: new Date(host - 60_000).toISOString() }, 'tok')).status).toBe(204);
    expect(clock.calls).toHaveLength(1);
    expect(server.logs.some((line) => /older than the last applied/.test(JSON.parse(line).msg))).toBe(true);
  });

  it('still initialises, with a warning, when the clock cannot be set', async () => {
    server = await startServer({ accessToken: 'tok' }, { setClock: async () => Promise.reject(new Error('date: cannot set date: Operation not permitted')) });
    const response = await post(server, { timestamp: '2001-01-01T00:00:00Z', envs: { A: '1' } }, 'tok');
    expect(response.status).toBe(204);
    expect(await (await get(server, '/envs', 'tok')).json()).toEqual({ A: '1' });
    const warning = server.logs.map((line) => JSON.parse(line)).find((entry) => entry.level === 40);
    expect(warning?.msg).toMatch(/cannot set the guest clock/);
  });
});

describe('GET /health', () => {
  it('answers without a token, before and after /init, with a constant body', async () => {
    const { server } = await start(undefined);
    const before = await fetch(`${server.url}/health`);
    expect(before.status).toBe(200);
    const body = await before.json();
    expect(body).toEqual({ status: 'ok', version: expect.any(String) });
    await post(server, { access_token: 'tok' });
    const after = await fetch(`${server.url}/health`, { headers: { authorization: 'Bearer wrong' } });
    expect(after.status).toBe(200);
    expect(await after.json()).toEqual(body);
  });
});
