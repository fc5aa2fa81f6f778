// Limits, stats and why each command ended, through the HTTP API (issue 26).
// On this host (cgroup v1/hybrid) envd runs in proc mode: limits and stats are
// a 409 that says why, and reasons still tell exited, signaled, killed and
// timed_out apart. A server given a directory laid out like cgroupfs shows
// what cgroup mode writes and reads (oom_killed, pids_exhausted, stats).
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCgroups } from '../../src/cgroups/detect.js';
import { commandUser } from '../helpers/command-user.js';
import { startServer, type TestServer } from '../helpers/server.js';

// Commands run as a plain user: root's login shell here (pyenv) must not be killed mid-start (README).
let user: Awaited<ReturnType<typeof commandUser>>;
beforeAll(async () => {
  user = await commandUser();
});
afterAll(() => user.remove());

const MIB = 1024 * 1024;

describe('in proc mode (this host)', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startServer({ defaultUser: user.user.name }, { cgroups: { mode: 'proc', why: 'cgroup v2 is not the unified hierarchy at /sys/fs/cgroup (a cgroup v1 or hybrid host)' } });
  });
  afterAll(() => server.close());

  it('refuses limits, default_limits and stats with a 409 that says why, and /metrics names the mode', async () => {
    const started = await server.json('POST', '/commands', { cmd: 'true', limits: { memory_bytes: 64 * MIB } });
    expect(started).toEqual({ status: 409, body: { message: expect.stringMatching(/^body\/limits: limits need a cgroup v2 per command, and this envd runs without: cgroup v2 is not the unified hierarchy/) } });
    expect((await server.json('POST', '/commands/stream', { cmd: 'true', limits: { pids: 10 } })).status).toBe(409);
    expect((await server.json('POST', '/init', { default_limits: { cpu: 1 } })).status).toBe(409);
    expect((await server.json('POST', '/init', { default_limits: {} })).status).toBe(204);
    const { body } = await server.json('POST', '/commands', { cmd: 'sleep 5', background: true });
    expect((await server.json('GET', `/commands/${body.pid}/stats`)).status).toBe(409);
    await server.json('DELETE', `/commands/${body.pid}`);
    expect((await server.json('GET', '/metrics')).body).toMatchObject({ commands_mode: 'proc', commands_mode_reason: expect.stringContaining('cgroup v1') });
  });

  it.each([
    [{ memory_bytes: 8 * MIB - 1 }, /memory_bytes must be from 8388608 \(8 MiB: what a shell needs to start\)/],
    [{ memory_bytes: 2 ** 40 + 1 }, /memory_bytes must be from/],
    [{ pids: 1 }, /pids must be from 2 to 4194304, got 1/],
    [{ cpu: 0 }, /cpu must be from 0.01 to 1024 cores, got 0/],
    [{ cpu: 1025 }, /cpu must be from 0.01 to 1024 cores/],
    [{ memory: 1 }, /must NOT have additional properties/],
    [{ pids: 2.5 }, /must be integer/],
  ])('answers 400 for limits %j before anything else, on POST /commands and on /init default_limits alike', async (limits, message) => {
    const { status, body } = await server.json('POST', '/commands', { cmd: 'true', limits });
    expect(status).toBe(400);
    expect(body.message).toMatch(message);
    // Issue 37: a bad value is a bad request on any machine, not "no cgroups here" (409).
    const init = await server.json('POST', '/init', { default_limits: limits });
    expect(init.status).toBe(400);
    expect(init.body.message).toMatch(message);
  });

  it('answers 400 for /init default_limits { memory_bytes: -1 }, not 409', async () => {
    const { status, body } = await server.json('POST', '/init', { default_limits: { memory_bytes: -1 } });
    expect({ status, message: body.message }).toEqual({ status: 400, message: expect.stringMatching(/^default_limits\/memory_bytes must be from 8388608/) });
  });

  it('takes limits: {} (no limit asked for) like /init default_limits: {}, cgroups or not', async () => {
    expect((await server.json('POST', '/init', { default_limits: {} })).status).toBe(204);
    const { status, body } = await server.json('POST', '/commands', { cmd: 'echo free', limits: {} });
    expect({ status, stdout: body.stdout }).toEqual({ status: 200, stdout: 'free\n' });
    expect((await server.json('POST', '/commands', { cmd: 'true', background: true, limits: {} })).status).toBe(200);
  });

  it('tells why each command ended: exited, signaled, timed_out, killed', async () => {
    expect((await server.json('POST', '/commands', { cmd: 'exit 3' })).body).toMatchObject({ exit_code: 3, reason: 'exited' });
    expect((await server.json('POST', '/commands', { cmd: 'kill -TERM $$' })).body).toMatchObject({ exit_code: 143, signal: 'SIGTERM', reason: 'signaled' });
    expect((await server.json('POST', '/commands', { cmd: 'sleep 10', timeout: 0.2 })).body).toMatchObject({ exit_code: 124, timed_out: true, reason: 'timed_out' });
    const { body } = await server.json('POST', '/commands', { cmd: 'sleep 10', background: true });
    const waited = server.json('GET', `/commands/${body.pid}/wait`);
    await new Promise((r) => setTimeout(r, 200));
    expect((await server.json('DELETE', `/commands/${body.pid}`)).body).toEqual({ killed: true });
    // DELETE takes the holder along with the tree, before it can record the end: envd's SIGKILL is the end.
    expect((await waited).body).toMatchObject({ exit_code: 137, signal: 'SIGKILL', reason: 'killed' });
  });
});

describe('in cgroup mode, on a directory laid out like cgroupfs', () => {
  let root: string;
  let server: TestServer;
  const commands = () => join(root, 'envd-commands');
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'envd-cgroupfs-api-'));
    writeFileSync(join(root, 'cgroup.controllers'), 'cpu memory pids\n');
    const mode = openCgroups({ root, selfCgroup: '0::/system.slice/envd.service\n', memTotal: 1024 * MIB }, 128 * MIB);
    server = await startServer({ defaultUser: user.user.name }, { cgroups: mode });
  });
  afterAll(async () => {
    await server.close();
    rmSync(root, { recursive: true, force: true });
  });

  /** Starts a background command and returns its pid and the cgroup envd made for it. */
  async function startIn(body: Record<string, unknown>): Promise<{ pid: number; cgroup: string }> {
    const before = new Set(readdirSync(commands()));
    const started = await server.json('POST', '/commands', { ...body, background: true });
    expect(started.status).toBe(200);
    const made = readdirSync(commands()).filter((name) => !before.has(name) && name !== 'memory.max' && name !== 'memory.swap.max' && name !== 'cgroup.subtree_control');
    expect(made).toHaveLength(1);
    return { pid: started.body.pid, cgroup: join(commands(), made[0]!) };
  }

  it('writes the limits, moves the command into its cgroup, lists limits and stats, and /metrics sums all commands', async () => {
    const { pid, cgroup } = await startIn({ cmd: 'sleep 0.5', limits: { memory_bytes: 32 * MIB, pids: 16, cpu: 0.25 } });
    expect(readFileSync(join(cgroup, 'memory.max'), 'utf8')).toBe(String(32 * MIB));
    expect(readFileSync(join(cgroup, 'pids.max'), 'utf8')).toBe('16');
    expect(readFileSync(join(cgroup, 'cpu.max'), 'utf8')).toBe('25000 100000');
    // The holder's child joined it before exec (a real cgroupfs then moves it; here the write is a file).
    expect(readFileSync(join(cgroup, 'cgroup.procs'), 'utf8')).toBe('0');
    writeFileSync(join(cgroup, 'cpu.stat'), 'usage_usec 1234\n');
    writeFileSync(join(cgroup, 'memory.current'), '2097152\n');
    writeFileSync(join(cgroup, 'pids.current'), '2\n');
    writeFileSync(join(commands(), 'memory.current'), '2097152\n');
    expect((await server.json('GET', `/commands/${pid}/stats`)).body).toEqual({ cpu_usec: 1234, memory_bytes: 2 * MIB, memory_peak_bytes: null, pids: 2 });
    const listed = (await server.json('GET', '/commands')).body.processes.find((p: { pid: number }) => p.pid === pid);
    expect(listed).toMatchObject({ limits: { memory_bytes: 32 * MIB, pids: 16, cpu: 0.25 }, stats: { cpu_usec: 1234 } });
    expect((await server.json('GET', '/metrics')).body).toMatchObject({ commands_mode: 'cgroup', commands_memory_bytes: 2 * MIB });
    expect((await server.json('GET', `/commands/${pid}/wait`)).body).toMatchObject({ exit_code: 0, reason: 'exited' });
  });

  it('says oom_killed when memory.events counts an OOM kill, and pids_exhausted when pids.max refused a fork', async () => {
    const oom = await startIn({ cmd: 'sleep 0.5; kill -KILL $$' });
    writeFileSync(join(oom.cgroup, 'memory.events'), 'oom 1\noom_kill 1\n');
    expect((await server.json('GET', `/commands/${oom.pid}/wait`)).body).toMatchObject({ exit_code: 137, signal: 'SIGKILL', reason: 'oom_killed' });
    const forks = await startIn({ cmd: 'sleep 0.5; exit 1' });
    writeFileSync(join(forks.cgroup, 'pids.events'), 'max 7\n');
    expect((await server.json('GET', `/commands/${forks.pid}/wait`)).body).toMatchObject({ exit_code: 1, reason: 'pids_exhausted' });
  });

  it('applies /init default_limits to commands that name none, field by field', async () => {
    expect((await server.json('POST', '/init', { default_limits: { pids: 99, memory_bytes: 16 * MIB } })).status).toBe(204);
    const { pid, cgroup } = await startIn({ cmd: 'true', limits: { pids: 50 } });
    expect(readFileSync(join(cgroup, 'pids.max'), 'utf8')).toBe('50');
    expect(readFileSync(join(cgroup, 'memory.max'), 'utf8')).toBe(String(16 * MIB));
    await server.json('GET', `/commands/${pid}/wait`);
    expect((await server.json('POST', '/init', { default_limits: {} })).status).toBe(204);
  });
});

describe('start-up in cgroup mode', () => {
  it("sweeps the cgroups a previous envd left without a command record, and keeps what is not envd's", async () => {
    const root = mkdtempSync(join(tmpdir(), 'envd-cgroupfs-sweep-'));
    try {
      writeFileSync(join(root, 'cgroup.controllers'), 'cpu memory pids\n');
      const leaked = join(root, 'envd-commands', '00000000deadbeef');
      const foreign = join(root, 'envd-commands', 'someone-else');
      mkdirSync(leaked, { recursive: true });
      mkdirSync(foreign);
      const mode = openCgroups({ root, selfCgroup: '0::/system.slice/envd.service\n', memTotal: 1024 * MIB }, 128 * MIB);
      const server = await startServer({ defaultUser: user.user.name }, { cgroups: mode });
      try {
        expect(existsSync(leaked)).toBe(false);
        expect(existsSync(foreign)).toBe(true);
        expect(server.logs.some((line) => line.includes('"sweptCgroups":1'))).toBe(true);
      } finally {
        await server.close();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
