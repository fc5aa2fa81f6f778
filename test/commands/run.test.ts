import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_TIMEOUT_SECONDS } from '../../src/commands/schemas.js';
import { countZombieChildren, waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';
import type { UnixUser } from '../../src/users.js';
import { createTestUser, currentUser, isRoot, type TestUser } from '../helpers/users.js';

let server: TestServer;
let dir: string;
let testUser: TestUser | undefined;

let me: UnixUser;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'envd-run-'));
  if (isRoot()) testUser = await createTestUser();
  else console.warn('\n!!! NOT ROOT: the user-switching tests (uid, gid, supplementary groups) are SKIPPED !!!\n');
  // When root, commands run as a fresh user by default: its login shell is quick
  // and quiet, and every command then goes through the user switch.
  me = testUser ?? (await currentUser());
  server = await startServer({ defaultUser: me.name });
});
afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
  testUser?.remove();
});

const run = (body: Record<string, unknown>) => server.json('POST', '/commands', body);

describe('POST /commands (foreground)', () => {
  it('returns exact unicode and multi-line stdout, stderr and the exit code', async () => {
    const { status, body } = await run({ cmd: `printf 'héllo wörld ✓ 😀\\nline 2\\n\\nlast'; printf 'oops\\n' >&2; exit 7` });
    expect(status).toBe(200);
    expect(body.stdout).toBe('héllo wörld ✓ 😀\nline 2\n\nlast');
    expect(body.stderr.endsWith('oops\n')).toBe(true);
    expect(body.exit_code).toBe(7);
    expect(body).not.toHaveProperty('timed_out');
    expect(body).not.toHaveProperty('signal');
  });

  it('reports exit code 0 and 1 as the shell gave them', async () => {
    expect((await run({ cmd: 'true' })).body.exit_code).toBe(0);
    expect((await run({ cmd: 'false' })).body.exit_code).toBe(1);
  });

  it('keeps a character whose bytes arrive in two separate writes whole', async () => {
    // 😀 is F0 9F 98 80; the pause makes the halves arrive as two chunks.
    const { body } = await run({ cmd: `printf 'a\\360\\237'; sleep 0.3; printf '\\230\\200b'` });
    expect(body.stdout).toBe('a😀b');
  });

  it('turns invalid UTF-8 into U+FFFD', async () => {
    const { body } = await run({ cmd: `printf 'x\\377y\\300z'` });
    expect(body.stdout).toBe('x\uFFFDy\uFFFDz');
  });

  it('returns 10 MB of output exactly', async () => {
    const { body } = await run({ cmd: 'head -c 10000000 /dev/zero | tr "\\0" "a"' });
    expect(body.stdout.length).toBe(10_000_000);
    expect(/^a+$/.test(body.stdout)).toBe(true);
    expect(body).not.toHaveProperty('stdout_truncated');
  });

  it('runs 50 commands at once, each getting its own output', async () => {
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => run({ cmd: `echo cmd-${i}; exit ${i % 5}` })));
    results.forEach(({ status, body }, i) => {
      expect(status).toBe(200);
      expect(body.stdout).toBe(`cmd-${i}\n`);
      expect(body.exit_code).toBe(i % 5);
    });
    // Each was collected by its own request, and so forgotten (--keep-collected 0).
    expect((await server.json('GET', '/commands')).body.processes).toEqual([]);
    expect((await server.json('GET', '/commands?finished=true')).body.processes).toEqual([]);
    await waitFor(() => countZombieChildren() === 0, 5_000, 'no zombie children');
  });

  it('layers the environment: user vars < sandbox envs < request envs, with nothing leaking between commands', async () => {
    server.app.envd.state.envs = { SANDBOX_ONLY: 's', BOTH: 'sandbox', USER: 'sandbox-user' };
    try {
      const show = 'echo "$HOME|$LOGNAME|$USER|$SHELL|$SANDBOX_ONLY|$BOTH|$REQ_ONLY"';
      const first = await run({ cmd: show, envs: { BOTH: 'request', REQ_ONLY: 'r' } });
      expect(first.body.stdout).toBe(`${me.home}|${me.name}|sandbox-user|${me.shell}|s|request|r\n`);
      const second = await run({ cmd: show });
      expect(second.body.stdout).toBe(`${me.home}|${me.name}|sandbox-user|${me.shell}|s|sandbox|\n`);
    } finally {
      server.app.envd.state.envs = {};
    }
    const after = await run({ cmd: 'echo "[$SANDBOX_ONLY][$BOTH]"' });
    expect(after.body.stdout).toBe('[][]\n');
  });

  it('does not pass envd\'s own environment to commands', async () => {
    process.env.ENVD_TEST_SECRET = 'do-not-leak';
    try {
      const { body } = await run({ cmd: 'env' });
      expect(body.stdout).not.toContain('ENVD_TEST_SECRET');
      expect(body.stdout).toContain('HOME=');
    } finally {
      delete process.env.ENVD_TEST_SECRET;
    }
  });

  describe('working directory', () => {
    it('uses the given absolute cwd', async () => {
      expect((await run({ cmd: 'pwd', cwd: dir })).body.stdout).toBe(`${dir}\n`);
    });

    it('defaults to default_workdir, else the user\'s home', async () => {
      expect((await run({ cmd: 'pwd' })).body.stdout).toBe(`${me.home}\n`);
      server.app.envd.state.defaultWorkdir = dir;
      try {
        expect((await run({ cmd: 'pwd' })).body.stdout).toBe(`${dir}\n`);
      } finally {
        server.app.envd.state.defaultWorkdir = undefined;
      }
    });

    it('refuses a missing cwd, a file, and a relative path with 400 naming cwd', async () => {
      const file = join(dir, 'a-file');
      writeFileSync(file, 'x');
      for (const cwd of [join(dir, 'missing'), file, 'relative/dir']) {
        const { status, body } = await run({ cmd: 'pwd', cwd });
        expect(status).toBe(400);
        expect(body.message).toMatch(/cwd/);
      }
    });
  });

  describe('users', () => {
    it('refuses an unknown user with 400', async () => {
      const { status, body } = await run({ cmd: 'id', user: 'no-such-user-xyz' });
      expect(status).toBe(400);
      expect(body.message).toMatch(/user.*no-such-user-xyz/);
    });


    it.skipIf(!isRoot())('runs as the named user with its uid, gid, supplementary groups, HOME and cwd (ROOT ONLY)', async () => {
      const user = testUser!;
      server.app.envd.state.defaultUser = 'root';
      let body;
      try {
        ({ body } = await run({ cmd: 'id -u; id -g; id -G; echo "$HOME $USER"; pwd; grep -E "^(Uid|Gid):" /proc/self/status', user: user.name }));
      } finally {
        server.app.envd.state.defaultUser = me.name;
      }
      const [uid, gid, groups, homeUser, cwd, uidLine, gidLine] = body.stdout.trim().split('\n');
      expect(Number(uid)).toBe(user.uid);
      expect(Number(gid)).toBe(user.gid);
      expect(groups.split(' ').map(Number).sort()).toEqual([user.gid, user.extraGroup.gid].sort());
      expect(homeUser).toBe(`${user.home} ${user.name}`);
      expect(cwd).toBe(user.home);
      // real, effective, saved and filesystem ids all dropped: no way back to root
      expect(uidLine.split(/\s+/).slice(1)).toEqual(Array(4).fill(String(user.uid)));
      expect(gidLine.split(/\s+/).slice(1)).toEqual(Array(4).fill(String(user.gid)));
    });

    it.skipIf(!isRoot())('uses default_user when the request names none, and runs as root when asked (ROOT ONLY)', async () => {
      expect((await run({ cmd: 'id -un' })).body.stdout).toBe(`${testUser!.name}\n`);
      expect((await run({ cmd: 'id -un; echo $HOME', user: 'root' })).body.stdout).toBe('root\n/root\n');
    });
  });

  it('describes every command route, with its error shape, in the OpenAPI document', () => {
    const doc = server.app.swagger() as any;
    const routes = [
      ['/commands', 'post'], ['/commands', 'get'], ['/commands/stream', 'post'], ['/commands/{pid}/stream', 'get'],
      ['/commands/{pid}/wait', 'get'], ['/commands/{pid}/stdin', 'post'], ['/commands/{pid}/stdin', 'delete'],
      ['/commands/{pid}/signal', 'post'], ['/commands/{pid}', 'delete'],
    ];
    for (const [path, method] of routes) {
      const operation = doc.paths[path!]?.[method!];
      expect(operation?.summary, `${method} ${path}`).toEqual(expect.any(String));
      expect(operation.responses['4XX'].content['application/json'].schema.required).toEqual(['message']);
    }
    expect(doc.paths['/commands/stream'].post.responses['200'].content).toHaveProperty('text/event-stream');
  });

  describe('validation', () => {
    it('answers 400 naming the field for a bad body', async () => {
      const cases: [Record<string, unknown>, RegExp][] = [
        [{}, /cmd/],
        [{ cmd: '' }, /cmd/],
        [{ cmd: 'true', timeout: '5' }, /timeout/],
        [{ cmd: 'true', timeout: -1 }, /timeout/],
        [{ cmd: 'true', timeout: MAX_TIMEOUT_SECONDS + 1 }, /timeout/],
        [{ cmd: 'true', envs: { A: 1 } }, /envs/],
        [{ cmd: 'true', envs: { 'A=B': 'x' } }, /envs/],
        [{ cmd: 'true', envs: { A: 'x\0y' } }, /envs/],
        [{ cmd: 'echo \0' }, /cmd/],
        [{ cmd: 'true', cwd: '/tmp\0x' }, /cwd/],
        [{ cmd: 'true', background: 'yes' }, /background/],
        [{ cmd: 'true', colour: 'blue' }, /additional properties/],
      ];
      for (const [body, message] of cases) {
        const answer = await run(body);
        expect(answer.status, JSON.stringify(body)).toBe(400);
        expect(answer.body.message, JSON.stringify(body)).toMatch(message);
      }
    });

    it('accepts the largest timeout', async () => {
      expect((await run({ cmd: 'echo ok', timeout: MAX_TIMEOUT_SECONDS })).body.stdout).toBe('ok\n');
    });

    it('refuses a JSON body over 10 MiB with 413 { message }', async () => {
      const { status, body } = await run({ cmd: 'true', envs: { BIG: 'x'.repeat(10 * 1024 * 1024) } });
      expect(status).toBe(413);
      expect(typeof body.message).toBe('string');
    });
  });
});
