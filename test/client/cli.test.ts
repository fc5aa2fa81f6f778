import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type TestServer } from '../helpers/server.js';

let server: TestServer;
let dir: string;

beforeAll(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), 'envd-cli-'));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await server.close();
});

/** Runs dist/envd VERB… as a child process with ENVD_URL/ENVD_TOKEN, optionally piping `input`. */
function envd(args: string[], input?: string, env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('dist/envd', args, { env: { ...process.env, ENVD_URL: server.url, ENVD_TOKEN: server.token, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

describe('envd CLI verbs (dist/envd as a child process)', () => {
  it('exec prints the output and passes the exit status through', async () => {
    const r = await envd(['exec', '--', 'sh', '-c', 'echo out; echo err >&2; exit 7']);
    expect(r).toMatchObject({ code: 7, stdout: 'out\n', stderr: 'err\n' });
  });

  it('exec -i pipes stdin; -e sets envs; --json prints the result', async () => {
    expect(await envd(['exec', '-i', '--', 'cat'], 'piped\n')).toMatchObject({ code: 0, stdout: 'piped\n' });
    const r = await envd(['exec', '--json', '-e', 'A=b c', '--', 'sh', '-c', 'echo "$A"']);
    expect(JSON.parse(r.stdout)).toMatchObject({ stdout: 'b c\n', exit_code: 0 });
  });

  it('ps, logs and kill a background command', async () => {
    const { pid } = await server.json('POST', '/commands', { cmd: 'echo started; sleep 30', background: true }).then((r) => r.body);
    const ps = await envd(['ps', '--json']);
    expect(JSON.parse(ps.stdout).some((p: { pid: number }) => p.pid === pid)).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    expect((await envd(['logs', String(pid)])).stdout).toBe('started\n');
    expect(await envd(['kill', '-s', 'TERM', String(pid)])).toMatchObject({ code: 0 });
    expect(await envd(['attach', String(pid)])).toMatchObject({ code: 143, stdout: 'started\n' });
    expect((await envd(['kill', String(pid)])).code).toBe(0);
  });

  it('cp copies a directory both ways as one archive (modes and symlinks kept, into an existing directory by name); cat and ls read remote files', async () => {
    const local = join(dir, 'src');
    mkdirSync(join(local, 'sub'), { recursive: true });
    writeFileSync(join(local, 'a'), 'A');
    writeFileSync(join(local, 'sub', 'b'), 'B');
    writeFileSync(join(local, 'run.sh'), '#!/bin/sh\n', { mode: 0o750 });
    symlinkSync('sub/b', join(local, 'link'));
    const up = await envd(['cp', '--json', local, `:${join(dir, 'remote')}`]);
    expect(up).toMatchObject({ code: 0 });
    expect(JSON.parse(up.stdout)).toEqual({ files: 3 }); // regular files; the symlink and directories are not counted
    expect((await envd(['cat', join(dir, 'remote', 'sub', 'b')])).stdout).toBe('B');
    expect((await envd(['ls', '-d', '2', join(dir, 'remote')])).stdout).toContain(join(dir, 'remote', 'sub', 'b'));
    expect((await envd(['cp', `:${join(dir, 'remote')}`, join(dir, 'back')])).code).toBe(0);
    expect(readFileSync(join(dir, 'back', 'a'), 'utf8')).toBe('A');
    expect(readFileSync(join(dir, 'back', 'sub', 'b'), 'utf8')).toBe('B');
    expect(statSync(join(dir, 'back', 'run.sh')).mode & 0o777).toBe(0o750);
    expect(readlinkSync(join(dir, 'back', 'link'))).toBe('sub/b');
    // Into a directory that exists: under the source's name, as cp -r does.
    expect((await envd(['cp', `:${join(dir, 'remote')}`, join(dir, 'back')])).code).toBe(0);
    expect(readFileSync(join(dir, 'back', 'remote', 'sub', 'b'), 'utf8')).toBe('B');
    expect(readdirSync(dir).filter((name) => name.startsWith('.envd-archive-'))).toEqual([]);
  });

  it('errors are one line and exit 1: bad token, unreachable, missing pid, missing path', async () => {
    for (const [args, env, says] of [
      [['exec', '--', 'true'], { ENVD_TOKEN: 'wrong' }, /bad or missing token/],
      [['ps', '--url', 'http://127.0.0.1:1'], {}, /cannot reach envd/],
      [['kill', '9999999'], {}, /no command with pid|not found|no such/i],
      [['cat', '/no/such/file'], {}, /no such file/],
    ] as const) {
      const r = await envd([...args], undefined, env);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(says);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
  });

  it('--help per verb and completion scripts', async () => {
    expect((await envd(['exec', '--help'])).stdout).toMatch(/^Usage: envd exec/);
    expect((await envd(['completion', 'bash'])).stdout).toContain('complete -W');
    expect((await envd(['completion', 'zsh'])).stdout).toContain('#compdef envd');
  });

  it('exec -t runs on a terminal (script gives it one)', async () => {
    const r = await new Promise<string>((resolve) => {
      execFile('script', ['-qec', `dist/envd exec -t -- tty`, '/dev/null'], { env: { ...process.env, ENVD_URL: server.url, ENVD_TOKEN: server.token } }, (_e, stdout) => resolve(stdout));
    });
    expect(r).toMatch(/\/dev\/pts\/\d+/);
  });
});
