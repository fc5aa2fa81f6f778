// envd-init (issue 25 §3) as PID 1 of its own pid, mount and UTS namespaces
// (unshare), which is what it is in a VM booted from a container image: it
// mounts what is missing, starts envd, restarts it after kill -9 with its
// commands re-adopted, reaps orphans, and ends everything on SIGTERM or
// busybox's poweroff signal (SIGUSR2). reboot() from the PID 1 of a pid
// namespace ends the namespace, so "powered off" is seen as its exit.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freePort, waitFor } from '../helpers/proc.js';
import { createTestUser, isRoot, type TestUser } from '../helpers/users.js';

/**
 * envd-init, envd and its runtime, linked into a directory outside /tmp and
 * /run: envd-init mounts a tmpfs over those inside its namespace, which would
 * hide a checkout under /tmp (where CI clones).
 */
let installed: string;
const INIT = () => join(installed, 'envd-init');
const TOKEN = 'init-test-token';


interface Booted {
  port: number;
  /** unshare's child: envd-init, PID 1 inside. */
  init: number;
  child: ChildProcess;
  exited: Promise<number | null>;
  console: () => string;
}

// Commands run as a plain user: root's login shell here (pyenv) must not be killed mid-start (README).
let user: TestUser;
beforeAll(async () => {
  if (!isRoot()) throw new Error('envd-init runs as PID 1 of its own namespaces: the test needs root');
  user = await createTestUser();
  installed = mkdtempSync('/var/tmp/envd-init-test-');
  // Hard links where /var/tmp is on the checkout's file system (the runtime is 110 MB), else a copy.
  for (const name of ['envd-init', 'envd', 'runtime']) execFileSync('sh', ['-c', 'cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"', 'sh', join(process.cwd(), 'dist', name), join(installed, name)]);
});
afterAll(() => {
  user?.remove();
  if (installed) rmSync(installed, { recursive: true, force: true });
});

const running: Booted[] = [];
afterEach(async () => {
  for (const booted of running.splice(0)) {
    try {
      process.kill(booted.init, 'SIGKILL');
    } catch {}
    await booted.exited;
  }
});

const childrenOf = (pid: number): number[] =>
  readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number);

async function boot(): Promise<Booted> {
  const port = await freePort();
  const child = spawn('unshare', ['--pid', '--fork', '--mount', '--uts', '--mount-proc', INIT()], {
    env: { ENVD_DEFAULT_USER: user.name, ENVD_HOST: '127.0.0.1', ENVD_PORT: String(port), ENVD_ACCESS_TOKEN: TOKEN, ENVD_SPOOL_DIR: '/tmp/envd-spool', ENVD_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await waitFor(() => childrenOf(child.pid!).length === 1, 5_000, 'envd-init started');
  const booted: Booted = { port, init: childrenOf(child.pid!)[0]!, child, exited, console: () => output };
  running.push(booted);
  await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => undefined))?.ok === true, 15_000, 'envd answering');
  return booted;
}

async function call(booted: Booted, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`http://127.0.0.1:${booted.port}${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return res.json();
}

describe('envd-init as PID 1', () => {
  it('mounts what is missing, reaps orphans, and restarts envd after kill -9 with its commands', async () => {
    const booted = await boot();
    const mounts = (await call(booted, 'POST', '/commands', { cmd: 'cat /proc/mounts; echo pid1=$(cat /proc/1/comm)' })).stdout as string;
    expect(mounts).toMatch(/^tmpfs \/run tmpfs/m);
    expect(mounts).toMatch(/^tmpfs \/tmp tmpfs/m);
    expect(mounts).toMatch(/ \/dev\/shm /m);
    expect(mounts).toContain('pid1=envd-init');

    // Orphans: a background child whose parent shell is gone comes to PID 1 and is reaped.
    await call(booted, 'POST', '/commands', { cmd: '(sleep 0.3 &) ; true' });
    await new Promise((r) => setTimeout(r, 800));
    const zombies = (await call(booted, 'POST', '/commands', { cmd: "grep -l '^State:.*Z' /proc/[0-9]*/status | wc -l" })).stdout;
    expect(zombies.trim()).toBe('0');

    // kill -9 of envd: envd-init starts it again, and it re-adopts the printing command.
    const { pid } = await call(booted, 'POST', '/commands', { cmd: 'for i in $(seq 1 30); do echo line $i; sleep 0.1; done; exit 4', background: true });
    const envd = childrenOf(booted.init).find((p) => readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'envd')!;
    process.kill(envd, 'SIGKILL');
    await waitFor(() => !childrenOf(booted.init).includes(envd), 5_000, 'envd gone');
    await waitFor(async () => (await fetch(`http://127.0.0.1:${booted.port}/health`).catch(() => undefined))?.ok === true, 15_000, 'envd back');
    expect(booted.console(), booted.console()).toMatch(/envd ended by signal 9\nenvd-init: restarting envd in 200 ms/);
    const waited = await call(booted, 'GET', `/commands/${pid}/wait`);
    expect(waited, JSON.stringify(waited)).toMatchObject({ exit_code: 4 });
    expect(waited.stdout).toBe(Array.from({ length: 30 }, (_, i) => `line ${i + 1}\n`).join(''));
  });

  it.each([
    ['SIGTERM', 'powering off'],
    ['SIGUSR2', 'powering off'],
    ['SIGUSR1', 'halted'],
  ] as const)('ends envd, its commands and every other process on %s, then %s', async (signal, how) => {
    const booted = await boot();
    // Durations no other process on this machine uses, so the search below finds only these.
    const mark = String(Math.floor(Math.random() * 1e6)).padStart(6, '0');
    await call(booted, 'POST', '/commands', { cmd: `sleep 600.${mark}`, background: true });
    await call(booted, 'POST', '/commands', { cmd: `setsid sleep 601.${mark} &`, background: false });
    process.kill(booted.init, signal);
    const code = await Promise.race([booted.exited, new Promise((r) => setTimeout(() => r('timeout'), 20_000))]);
    expect(code).not.toBe('timeout');
    expect(booted.console()).toContain('shutting down: stopping envd');
    expect(booted.console()).toContain(how);
    const left = execSleepers(mark);
    expect(left).toEqual([]);
  });
});

/** The sleeps the test started (600 and 601 s and its mark), wherever they are. */
function execSleepers(mark: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
      if (args === `sleep 600.${mark}` || args === `sleep 601.${mark}`) found.push(`${pid}: ${args}`);
    } catch {}
  }
  return found;
}
