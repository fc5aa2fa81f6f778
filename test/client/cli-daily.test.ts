// Issue 44: the CLI as a daily tool: byte-exact through exec both ways, safe in
// pipes, complete on its own (exec -d, resume hints, statuses), errors that say what to do.
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closestVerb } from '../../src/cli/main.js';
import { parseShellArgs } from '../../src/shell/options.js';
import { commandUser } from '../helpers/command-user.js';
import { waitFor } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';

let server: TestServer;
let dir: string;
let user: Awaited<ReturnType<typeof commandUser>>;

// Commands run as a plain user: these tests kill commands mid-start (closed pipes, envd kill), and a root
// login shell killed while pyenv takes its lock leaves every later root shell waiting 60 s.
beforeAll(async () => {
  user = await commandUser();
  server = await startServer({ defaultUser: user.user.name });
  dir = mkdtempSync(join(tmpdir(), 'envd-cli-daily-'));
  chmodSync(dir, 0o755);
});
afterAll(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await server?.close();
  user?.remove();
});

interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: Buffer;
  stderr: string;
}

/** Runs a shell line (with dist/envd in it) with ENVD_URL/ENVD_TOKEN set; stdout as bytes. `onStdout` sees it as it comes. */
function sh(line: string, { env = {}, onStdout }: { env?: Record<string, string>; onStdout?: (text: string, child: ReturnType<typeof spawn>) => void } = {}): Promise<Ran> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', line], { env: { ...process.env, ENVD_URL: server.url, ENVD_TOKEN: server.token, ...env } });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      out.push(d);
      onStdout?.(Buffer.concat(out).toString(), child);
    });
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code, signal) => resolve({ code, signal, stdout: Buffer.concat(out), stderr }));
    child.stdin.end();
  });
}

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe('byte-exact exec (stdout not a terminal: encoding base64; stdin as bytes)', () => {
  it('envd exec -- cat f > g copies 30 MB of random bytes exactly', { timeout: 120_000 }, async () => {
    const file = join(dir, 'random.bin');
    const bytes = randomBytes(30_000_000);
    writeFileSync(file, bytes);
    const r = await sh(`dist/envd exec -- cat ${file} > ${join(dir, 'copy.bin')}`);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(sha(readFileSync(join(dir, 'copy.bin')))).toBe(sha(bytes));
  });

  it('tar c | envd exec -i -- tar x unpacks 30 MB of random bytes exactly', { timeout: 120_000 }, async () => {
    const src = join(dir, 'tar-src');
    const dest = join(dir, 'tar-dest');
    mkdirSync(src);
    mkdirSync(dest);
    chownSync(dest, user.user.uid, user.user.gid);
    const bytes = randomBytes(30_000_000);
    writeFileSync(join(src, 'random.bin'), bytes);
    // é split over every possible boundary of a read: text too goes through untouched.
    writeFileSync(join(src, 'text.txt'), 'é'.repeat(100_000));
    const r = await sh(`tar cz -C ${src} . | dist/envd exec -i -- tar xz -C ${dest}`);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(sha(readFileSync(join(dest, 'random.bin')))).toBe(sha(bytes));
    expect(readFileSync(join(dest, 'text.txt'), 'utf8')).toBe('é'.repeat(100_000));
  });

  it('attach and logs -f with stdout on a pipe give the bytes exactly', async () => {
    const bytes = randomBytes(200_000);
    writeFileSync(join(dir, 'small.bin'), bytes);
    const pid = (await sh(`dist/envd exec -d -- cat ${join(dir, 'small.bin')}`)).stdout.toString().trim();
    expect(pid).toMatch(/^\d+$/);
    for (const verb of ['attach', 'logs -f']) {
      const r = await sh(`dist/envd ${verb} ${pid}`);
      expect(r.code, verb).toBe(0);
      expect(sha(r.stdout), verb).toBe(sha(bytes));
    }
  });
});

describe('safe in pipes', () => {
  it('every verb whose reader closes the pipe ends quietly with the closed-pipe status (141)', { timeout: 60_000 }, async () => {
    const pid = (await sh('dist/envd exec -d -- seq 1 300000')).stdout.toString().trim();
    // Until it ends, without collecting it: a wait would, and a collected command is forgotten (attach and logs below need it).
    const running = async () => ((await (await server.call('GET', '/commands?finished=true')).json()) as { processes: { pid: number; running: boolean }[] }).processes.find((p) => p.pid === Number(pid))?.running;
    await waitFor(async () => (await running()) === false, 30_000, `pid ${pid} to end`);
    writeFileSync(join(dir, 'long.txt'), 'x\n'.repeat(2_000_000));
    // A listing longer than a pipe holds.
    mkdirSync(join(dir, 'many'));
    for (let i = 0; i < 3000; i++) writeFileSync(join(dir, 'many', `file-${i}`), '');
    for (const verb of ['exec -- seq 1 300000', `attach ${pid}`, `logs ${pid}`, `logs -f ${pid}`, `cat ${join(dir, 'long.txt')}`, `ls ${join(dir, 'many')}`]) {
      // pipefail's status of the left side: the envd's own.
      const r = await sh(`set -o pipefail; dist/envd ${verb} | head -c 10 > /dev/null`);
      expect(r.stderr, verb).toBe('');
      expect(r.code, verb).toBe(141);
    }
  });
});

describe('complete on its own', () => {
  it('exec -d prints the pid of a background command (--json: {pid})', async () => {
    const plain = await sh('dist/envd exec -d -- sleep 30');
    expect(plain.code).toBe(0);
    const pid = Number(plain.stdout.toString());
    expect((await server.json('GET', `/commands`)).body.processes.some((p: { pid: number }) => p.pid === pid)).toBe(true);
    const json = JSON.parse((await sh('dist/envd exec -d --json -- true')).stdout.toString());
    expect(json.pid).toBeGreaterThan(0);
    expect((await sh(`dist/envd kill ${pid}`)).code).toBe(0);
  });

  it('logs -f ends with the command\'s status: its exit code, or 137 when envd kill ends it', async () => {
    const pid = (await sh("dist/envd exec -d -- sh -c 'echo hi; exit 3'")).stdout.toString().trim();
    expect((await sh(`dist/envd logs -f ${pid}`)).code).toBe(3);
    const sleeper = (await sh('dist/envd exec -d -- sleep 30')).stdout.toString().trim();
    const following = sh(`dist/envd logs -f ${sleeper}`);
    await new Promise((r) => setTimeout(r, 700));
    expect((await sh(`dist/envd kill ${sleeper}`)).code).toBe(0);
    const r = await following;
    expect(r.stderr).toBe('');
    expect(r.code).toBe(137);
  });

  it('an interrupted attach prints the id to resume from, and --from gives exactly the rest', { timeout: 30_000 }, async () => {
    const pid = (await sh("dist/envd exec -d -- sh -c 'for i in $(seq 1 30); do echo line $i; sleep 0.1; done'")).stdout.toString().trim();
    let interrupted = false;
    const first = await sh(`exec dist/envd attach ${pid}`, {
      onStdout: (text, child) => {
        if (interrupted || !text.includes('line 3\n')) return;
        interrupted = true;
        child.kill('SIGINT');
      },
    });
    expect(first.code).toBe(130);
    const hint = /resume with: envd attach --from (\d+-\d+) (\d+)/.exec(first.stderr);
    expect(hint, first.stderr).not.toBeNull();
    expect(hint![2]).toBe(pid);
    const rest = await sh(`dist/envd attach --from ${hint![1]} ${pid}`);
    const all = Array.from({ length: 30 }, (_, i) => `line ${i + 1}\n`).join('');
    expect(first.stdout.toString() + rest.stdout.toString()).toBe(all);
    expect(rest.code).toBe(0);
    // logs takes the same id: the kept bytes after it.
    expect((await sh(`dist/envd logs --from ${hint![1]} ${pid}`)).stdout.toString()).toBe(rest.stdout.toString());
    expect((await sh(`dist/envd logs --from nonsense ${pid}`)).code).toBe(2);
  });

  it('envd --help lists the verbs; a mistyped verb gets "did you mean"', async () => {
    const help = await sh('dist/envd --help');
    for (const verb of ['exec', 'ps', 'attach', 'logs', 'kill', 'cat', 'ls', 'cp', 'watch', 'shell']) expect(help.stdout.toString()).toContain(`envd ${verb}`);
    expect(help.stdout.toString()).toContain('--from');
    expect(help.stdout.toString()).toContain('--port');
    const typo = await sh('dist/envd stauts');
    expect(typo.code).toBe(2);
    expect(typo.stderr).toBe('envd: unknown verb "stauts", did you mean ps? (envd --help lists the verbs)\n');
    expect(closestVerb('atach')).toBe('attach');
    expect(closestVerb('frobnicate')).toBeUndefined();
  });

  it('envd shell reads ENVD_URL and ENVD_TOKEN like every verb (flags still win)', () => {
    expect(parseShellArgs([], { ENVD_URL: 'http://10.0.0.1:1234/', ENVD_TOKEN: 't1' })).toMatchObject({ url: 'http://10.0.0.1:1234', token: 't1' });
    expect(parseShellArgs(['--url', 'http://a:1', '--token', 't2'], { ENVD_URL: 'http://b:2', ENVD_TOKEN: 't1' })).toMatchObject({ url: 'http://a:1', token: 't2' });
    expect(parseShellArgs([], { ENVD_ACCESS_TOKEN: 't3' })).toMatchObject({ token: 't3' });
  });
});

describe('errors: one line that says what to do', () => {
  it('cp of a missing local source, a blocked port, an unknown signal, an unwritable local target', async () => {
    const remoteFile = join(dir, 'remote.txt');
    writeFileSync(remoteFile, 'x');
    writeFileSync(join(dir, 'a-file'), 'x');
    for (const [line, code, says] of [
      ['dist/envd cp /nope :/x', 1, /^envd cp: \/nope: no such file or directory here \(a remote source is written :\/nope\)$/],
      ['ENVD_URL=http://127.0.0.1:1 dist/envd ps', 1, /fetch refuses that port .*run envd on another port/],
      ['dist/envd kill -s FOO 1', 2, /unknown signal "FOO"; give one of .*TERM.*KILL/],
      [`dist/envd cp :${remoteFile} ${join(dir, 'a-file', 'under-a-file')}`, 1, /^envd cp: cannot write .*under-a-file: a part of the path is a file, not a directory \(ENOTDIR\)$/],
    ] as const) {
      const r = await sh(line);
      expect(r.code, line).toBe(code);
      expect(r.stderr.split('\n')[0], line).toMatch(says);
      expect(r.stderr, line).not.toMatch(/cp: cp:|\.envd-archive-|at .*\.js:\d+/);
    }
  });
});
