// Issue 30: re-adoption tells a holder it cannot reach from one that is gone.
// A holder that is stopped, or that envd cannot connect to for lack of
// descriptors, is alive: its command is listed as running, reached again
// later, and ends with its real exit code and all of its output. Only a holder
// whose pid record says it is gone has finished.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { commandResult } from '../../src/commands/result.js';
import { ProcessRegistry } from '../../src/commands/registry.js';
import { prepareCommand } from '../../src/commands/spawn.js';
import { createLogger } from '../../src/logger.js';
import { SandboxState } from '../../src/sandbox-state.js';
import { commandUser } from '../helpers/command-user.js';
import { HOLDER_BINARY, holderArgs } from '../helpers/holder.js';
import { countFds, waitFor } from '../helpers/proc.js';
import { makeEnvdDirs, startServer, testConfig, type TestServer } from '../helpers/server.js';

let user: Awaited<ReturnType<typeof commandUser>>;
let dirs: ReturnType<typeof makeEnvdDirs>;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  user = await commandUser();
});
afterAll(() => user?.remove());
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  dirs?.remove();
});

/** The holder of a command: its shell's parent. */
const holderOf = (shellPid: number) => Number(readFileSync(`/proc/${shellPid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
const signal = (pid: number, name: NodeJS.Signals) => {
  try {
    process.kill(pid, name);
  } catch {
    // gone
  }
};

describe('a holder envd cannot reach is not gone', () => {
  it('keeps a command whose holder is stopped across a restart running, and reaches it once the holder goes on', async () => {
    dirs = makeEnvdDirs();
    const start = async () => {
      const server = await startServer({ defaultUser: user.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
      cleanups.push(() => server.close());
      return server;
    };
    const first = await start();
    const { body } = await first.json('POST', '/commands', { cmd: 'read x; echo "before $x"; for i in 1 2 3; do echo "line $i"; done; exit 7', background: true, stdin: true });
    const pid = body.pid as number;
    const holder = holderOf(pid);
    signal(holder, 'SIGSTOP');
    cleanups.push(() => signal(holder, 'SIGCONT'));
    await first.detach();

    // The new envd cannot get a HELLO from the stopped holder: the command is running, not "exit 1".
    const second: TestServer = await start();
    const listed = (await second.json('GET', '/commands')).body.processes.find((p: any) => p.pid === pid);
    expect(listed).toMatchObject({ running: true });
    expect((await second.json('POST', `/commands/${pid}/stdin`, { data: 'x\n' })).status).toBe(503);

    signal(holder, 'SIGCONT');
    await waitFor(async () => (await second.json('POST', `/commands/${pid}/stdin`, { data: 'again\n' })).status === 200, 20_000, 'the holder to be reached again');
    expect((await second.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: 'before again\nline 1\nline 2\nline 3\n', stderr: '', exit_code: 7, reason: 'exited' });
  });

  it('re-adopts commands whose holders it cannot connect to for lack of descriptors, once it has them again', async () => {
    dirs = makeEnvdDirs();
    const config = testConfig({ stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    const state = new SandboxState(config, user.user.name);
    const first = await ProcessRegistry.open(config, createLogger('silent'));
    const pids: number[] = [];
    for (let i = 0; i < 8; i++) {
      const proc = await first.start(await prepareCommand({ cmd: `sleep 2; echo "out ${i}"; exit ${i + 1}` }, state), { background: true, timeoutMs: 0 });
      pids.push(proc.pid);
    }
    first.detach();
    await new Promise((r) => setTimeout(r, 200)); // its links' descriptors close on the next turns of the loop

    // A few descriptors to spare, no more: most of the adoption's connects fail with EMFILE. Nothing can be
    // spawned meanwhile (a spawn needs descriptors too), so a process started before raises the limit again.
    const [soft, hard] = execFileSync('prlimit', ['--pid', String(process.pid), '--nofile', '--raw', '--noheadings', '--output=SOFT,HARD'], { encoding: 'utf8' }).trim().split(/\s+/);
    const raiser = spawn('sh', ['-c', `sleep 1.5; exec prlimit --pid ${process.pid} --nofile=${soft}:${hard}`], { stdio: 'ignore' });
    const raised = new Promise((resolve) => raiser.once('exit', resolve));
    execFileSync('prlimit', ['--pid', String(process.pid), `--nofile=${countFds() + 6}:${hard}`]);
    const lines: string[] = [];
    const sink = new Writable({ write: (chunk, _encoding, done) => (lines.push(String(chunk)), done()) });
    const second = await ProcessRegistry.open(config, createLogger('info', sink));
    await raised;
    cleanups.push(() => second.killAll());
    // Every command is tracked (at once or after a retry), none was taken for ended.
    await waitFor(() => pids.every((pid) => second.get(pid)), 20_000, 'every command to be re-adopted');
    // The limit did bite: some of them had to be reached again later.
    expect(lines.some((line) => line.includes('retrying'))).toBe(true);
    for (const [i, pid] of pids.entries()) {
      const proc = second.get(pid)!;
      expect(await proc.finished).toEqual({ exit_code: i + 1, reason: 'exited' });
      expect(await commandResult(proc)).toEqual({ stdout: `out ${i}\n`, stderr: '', exit_code: i + 1, reason: 'exited' });
    }
  });

  it('re-adopts a command whose holder had not written its pid file when envd stopped', async () => {
    dirs = makeEnvdDirs();
    const config = testConfig({ stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    // The usage table and directories, as the previous envd left them.
    const previous = await ProcessRegistry.open(config, createLogger('silent'));
    previous.detach();
    const id = randomBytes(8).toString('hex');
    const dir = join(dirs.stateDir, 'cmds', id);
    mkdirSync(dir, { mode: 0o700 });
    const slot = 5;
    writeFileSync(join(dir, 'meta.json'), JSON.stringify({ v: 1, cmd: 'echo late; exit 4', cwd: '/', user: 'root', background: true, stdin: false, pty: null, started_at: new Date().toISOString(), deadline_ms: null, slot }));
    // The holder is on its way but stopped before it runs (the spawner forked it; envd died before its ready line).
    const args = holderArgs({ command: ['sh', '-c', 'echo late; exit 4'] }, { dir, usageFile: join(dirs.stateDir, 'usage'), spoolDir: dirs.spoolDir, slot });
    const launcher = spawn('sh', ['-c', 'kill -STOP $$; exec "$0" "$@"', HOLDER_BINARY, ...args], { detached: true, stdio: 'ignore' });
    cleanups.push(() => signal(launcher.pid!, 'SIGKILL'));
    await waitFor(() => readFileSync(`/proc/${launcher.pid}/stat`, 'utf8').split(') ')[1]!.startsWith('T'), 5_000, 'the holder to be stopped');

    const registry = await ProcessRegistry.open(config, createLogger('silent'));
    cleanups.push(() => registry.killAll());
    expect(registry.list()).toEqual([]);
    signal(launcher.pid!, 'SIGCONT');
    await waitFor(() => registry.list().length === 1, 10_000, 'the command to be re-adopted');
    const proc = registry.list()[0]!;
    expect(await proc.finished).toEqual({ exit_code: 4, reason: 'exited' });
    expect(await commandResult(proc)).toEqual({ stdout: 'late\n', stderr: '', exit_code: 4, reason: 'exited' });
  });
});
