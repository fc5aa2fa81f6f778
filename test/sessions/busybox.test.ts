import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, linkSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/proc.js';
import { collectEvents } from '../helpers/sse.js';

// Sessions in a busybox-only root (the busybox guest): dist/envd chrooted, no bash, busybox's ash as sh.
const DIST = join(process.cwd(), 'dist');
const TOKEN = 'session-busybox-token';
const APPLETS = ['sh', 'cat', 'echo', 'printf', 'sleep', 'head', 'tr', 'wc', 'pwd', 'ls', 'setsid', 'nohup'];

let work: string;
let root: string;
let envd: { port: number; child: ChildProcess; exited: Promise<void> };

function place(from: string, to: string): void {
  if (statSync(from).isDirectory()) {
    mkdirSync(to, { recursive: true });
    for (const name of readdirSync(from)) place(join(from, name), join(to, name));
    return;
  }
  try {
    linkSync(from, to);
  } catch {
    copyFileSync(from, to);
  }
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'envd-session-busybox-'));
  root = join(work, 'root');
  for (const dir of ['bin', 'etc', 'opt/envd', 'tmp', 'proc', 'dev', 'root']) mkdirSync(join(root, dir), { recursive: true });
  copyFileSync('/bin/busybox', join(root, 'bin/busybox'));
  for (const applet of APPLETS) symlinkSync('busybox', join(root, 'bin', applet));
  writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  writeFileSync(join(root, 'etc/group'), 'root:x:0:\n');
  execFileSync('mknod', ['-m', '666', join(root, 'dev/null'), 'c', '1', '3']);
  execFileSync('mknod', ['-m', '666', join(root, 'dev/zero'), 'c', '1', '5']);
  execFileSync('chmod', ['1777', join(root, 'tmp')]);
  place(join(DIST, 'envd'), join(root, 'opt/envd/envd'));
  place(join(DIST, 'runtime'), join(root, 'opt/envd/runtime'));
  execFileSync('mount', ['-t', 'proc', 'proc', join(root, 'proc')]);
  const port = await freePort();
  const child = spawn('/usr/sbin/chroot', [root, '/opt/envd/envd', '--host', '127.0.0.1', '--port', String(port), '--state-dir', '/tmp/envd-state', '--spool-dir', '/tmp/envd-spool', '--log-level', 'warn'], {
    env: { PATH: '/bin', ENVD_ACCESS_TOKEN: TOKEN },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  envd = { port, child, exited };
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break;
    } catch {}
    if (child.exitCode !== null || i > 300) throw new Error(`envd did not start: ${child.exitCode}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}, 60_000);

afterAll(async () => {
  envd?.child.kill('SIGTERM');
  await envd?.exited;
  try {
    execFileSync('umount', ['-l', join(root, 'proc')], { stdio: 'ignore' });
  } catch {}
  rmSync(work, { recursive: true, force: true });
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`http://127.0.0.1:${envd.port}${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

describe('sessions in a busybox-only root', () => {
  it('runs in busybox sh when there is no bash, and keeps its state', async () => {
    const created = await call('POST', '/sessions', {});
    expect(created).toMatchObject({ status: 201, body: { shell: 'sh', user: 'root', cwd: '/root' } });
    const id = created.body.id;
    expect((await call('POST', '/sessions', { shell: 'bash' })).status).toBe(400);
    await call('POST', `/sessions/${id}/commands`, { cmd: 'cd /tmp; X=1; g() { echo "g$X"; }; alias al="echo aliased"' });
    expect((await call('POST', `/sessions/${id}/commands`, { cmd: 'pwd; g; al' })).body).toEqual({ stdout: '/tmp\ng1\naliased\n', stderr: '', exit_code: 0, reason: 'exited' });
    await call('DELETE', `/sessions/${id}`);
  });

  it('keeps the rules: markers, $?, stdin, heredoc, syntax error, timeout, background job, binary and 10 MiB output, exit', async () => {
    const id = (await call('POST', '/sessions', {})).body.id;
    const run = (cmd: string, extra: Record<string, unknown> = {}) => call('POST', `/sessions/${id}/commands`, { cmd, ...extra });
    expect((await run("printf '\\036envd:%s:e:0\\036' fake; printf tail; (exit 7)")).body).toMatchObject({ stdout: '\x1eenvd:fake:e:0\x1etail', exit_code: 7 });
    expect((await run('echo "carried=$?"')).body).toMatchObject({ stdout: 'carried=7\n', exit_code: 0 });
    expect((await run('cat')).body).toMatchObject({ stdout: '', exit_code: 0 });
    expect((await run('cat', { stdin: 'in' })).body).toMatchObject({ stdout: 'in', exit_code: 0 });
    expect((await run('cat <<EOF\nh $((2*3))\nEOF')).body).toMatchObject({ stdout: 'h 6\n', exit_code: 0 });
    expect((await run('fi')).body.exit_code).toBe(2);
    expect((await run('sleep 30; echo no', { timeout: 0.3 })).body).toMatchObject({ stdout: '', exit_code: 124, timed_out: true });
    // Under set -e too: the interrupt turns errexit off for its return only.
    await run('set -e');
    const interrupted = (await run('sleep 30', { timeout: 0.3 })).body;
    expect(interrupted).toMatchObject({ exit_code: 124, timed_out: true });
    expect(interrupted.session_ended).toBeUndefined();
    expect((await run('echo "$?"; case $- in *e*) echo errexit;; esac; set +e')).body).toMatchObject({ stdout: '130\nerrexit\n', exit_code: 0 });
    expect((await run('sleep 60 & echo bg')).body).toMatchObject({ stdout: 'bg\n', exit_code: 0 });
    expect((await run('head -c 10485760 /dev/zero | tr "\\0" b | wc -c')).body.stdout.trim()).toBe('10485760');
    expect((await run('head -c 10485760 /dev/zero | tr "\\0" b')).body.stdout).toHaveLength(10485760);
    const res = await fetch(`http://127.0.0.1:${envd.port}/sessions/${id}/commands/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ cmd: "printf '\\200\\377\\036'", encoding: 'base64' }),
    });
    const events = await collectEvents(res);
    expect([...Buffer.concat(events.filter((e) => e.event === 'stdout').map((e) => Buffer.from(e.data.data, 'base64')))]).toEqual([0x80, 0xff, 0x1e]);
    expect((await run('exit 3')).body).toMatchObject({ exit_code: 3, session_ended: true });
    expect((await run('true')).status).toBe(410);
  });
});
