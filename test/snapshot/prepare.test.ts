import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { CommandCgroups } from '../../src/cgroups/command-cgroups.js';
import { openCgroups, systemLocation, type CgroupMode } from '../../src/cgroups/detect.js';
import type { MachineOverrides } from '../../src/snapshot/machine.js';
import { startServer, type TestServer } from '../helpers/server.js';

// POST /snapshot/prepare and /snapshot/thaw on a real server, with the
// machine's cgroup tree laid out in a temporary directory (the test plays the
// kernel's part in cgroup.events) and the holder's jobs recorded: nothing here
// syncs, drops the caches of or freezes this shared machine.

const dir = mkdtempSync(join(tmpdir(), 'envd-prepare-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** A cgroup v2 layout like the guest's: the commands' parent exists and reads back frozen once told to freeze. */
function fakeCgroupV2(name: string): { mode: CgroupMode; commands: string } {
  const root = join(dir, name);
  mkdirSync(root, { recursive: true });
  writeFileSync(join(root, 'cgroup.controllers'), 'cpu memory pids\n');
  const cgroups = CommandCgroups.setUp(root, undefined);
  writeFileSync(join(cgroups.commands, 'cgroup.events'), 'populated 1\nfrozen 1\n');
  return { mode: { mode: 'cgroup', cgroups }, commands: cgroups.commands };
}

function recorder() {
  const jobs: string[][] = [];
  return { jobs, job: async (args: readonly string[]) => void jobs.push([...args]) };
}

function machine(job: (args: readonly string[]) => Promise<void>, extra: MachineOverrides['snapshot'] = {}): MachineOverrides {
  return { snapshot: { job, selfCgroup: () => '0::/system.slice/envd.service\n', ...extra } };
}

const freezeFile = (commands: string) => readFileSync(join(commands, 'cgroup.freeze'), 'utf8');

describe('POST /snapshot/prepare on cgroup v2', () => {
  it('freezes the commands, syncs, trims envd and answers every figure; /health answers while frozen', async () => {
    const { mode, commands } = fakeCgroupV2('answers');
    const { jobs, job } = recorder();
    server = await startServer({}, { cgroups: mode, machine: machine(job) });
    const { status, body } = await server.json('POST', '/snapshot/prepare', {});
    expect(status).toBe(200);
    expect(body).toMatchObject({ frozen: 1, unconfirmed: 0, dropped_bytes: 0, fs_frozen: [] });
    for (const field of ['synced_ms', 'envd_rss_before', 'envd_rss_after', 'took_ms']) expect(body[field]).toBeGreaterThanOrEqual(0);
    expect(body.envd_rss_after).toBeGreaterThan(0);
    expect(freezeFile(commands)).toBe('1');
    expect(jobs).toEqual([['--sync']]);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('thaws at the next /init only after the clock is set, so no command sees the stale time', async () => {
    const { mode, commands } = fakeCgroupV2('init');
    const atClock: string[] = [];
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job), setClock: async () => void atClock.push(freezeFile(commands)) });
    expect((await server.json('POST', '/snapshot/prepare', { freeze: 'commands' })).status).toBe(200);
    const hourAhead = new Date(Date.now() + 3_600_000).toISOString();
    expect((await server.call('POST', '/init', { timestamp: hourAhead })).status).toBe(204);
    expect(atClock).toEqual(['1']);
    expect(freezeFile(commands)).toBe('0');
  });

  it('thaws on POST /snapshot/thaw, answering what it thawed, and a second thaw thaws nothing', async () => {
    const { mode, commands } = fakeCgroupV2('thaw');
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job) });
    await server.json('POST', '/snapshot/prepare', {});
    expect(await server.json('POST', '/snapshot/thaw')).toEqual({ status: 200, body: { thawed: 1, fs_thawed: [], by: 'request' } });
    expect(freezeFile(commands)).toBe('0');
    expect(await server.json('POST', '/snapshot/thaw')).toEqual({ status: 200, body: { thawed: 0, fs_thawed: [], by: 'request' } });
  });

  it('refuses to start a command or a session, or run a session command, while the commands are frozen, 409 saying what thaws them', async () => {
    const { mode } = fakeCgroupV2('starts');
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job) });
    await server.json('POST', '/snapshot/prepare', {});
    // A session's routes too: its shell is frozen, a command sent to it would wait silent until its timeout.
    for (const path of ['/commands', '/commands/stream', '/sessions', '/sessions/00000000-0000-4000-8000-000000000000/commands', '/sessions/00000000-0000-4000-8000-000000000000/commands/stream']) {
      const { status, body } = await server.json('POST', path, path === '/sessions' ? {} : { cmd: 'true' });
      expect(status, path).toBe(409);
      expect(body.message).toMatch(/frozen for a snapshot.*\/init or POST \/snapshot\/thaw/);
    }
    // A service's start too: its run would be born frozen.
    const put = await server.json('PUT', '/services/frozen-start', { cmd: 'true' });
    expect(put.status).toBe(409);
    expect(put.body.message).toMatch(/frozen for a snapshot/);
    expect((await server.json('GET', '/commands')).status).toBe(200);
    await server.json('POST', '/snapshot/thaw');
    expect((await server.json('POST', '/commands', { cmd: 'true', background: true })).status).not.toBe(409);
  });

  it('thaws by itself after thaw_after_ms when neither a thaw nor /init comes', async () => {
    const { mode, commands } = fakeCgroupV2('timer');
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job) });
    await server.json('POST', '/snapshot/prepare', { thaw_after_ms: 300 });
    expect(freezeFile(commands)).toBe('1');
    const deadline = Date.now() + 10_000;
    while (freezeFile(commands) !== '0' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    expect(freezeFile(commands)).toBe('0');
  });

  it('drops the caches and compacts memory with drop_caches, through the knobs it was given', async () => {
    const { mode } = fakeCgroupV2('drop');
    const knobs = { dropCaches: join(dir, 'drop_caches'), compactMemory: join(dir, 'compact_memory'), meminfo: join(dir, 'meminfo') };
    writeFileSync(knobs.meminfo, 'MemTotal: 1000 kB\nCached: 400 kB\nBuffers: 10 kB\nSReclaimable: 5 kB\n');
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job, { memory: knobs }) });
    const { status, body } = await server.json('POST', '/snapshot/prepare', { freeze: 'none', drop_caches: true });
    expect(status).toBe(200);
    expect(body.frozen).toBe(0);
    expect(readFileSync(knobs.dropCaches, 'utf8')).toBe('3');
    expect(readFileSync(knobs.compactMemory, 'utf8')).toBe('1');
  });

  it('thaws what it froze when a later step fails, and answers the failure', async () => {
    const { mode, commands } = fakeCgroupV2('fails');
    const job = async (args: readonly string[]) => {
      if (args[0] === '--sync') throw new Error('envd-holder --sync: EIO');
    };
    server = await startServer({}, { cgroups: mode, machine: machine(job) });
    const { status } = await server.json('POST', '/snapshot/prepare', {});
    expect(status).toBe(500);
    expect(freezeFile(commands)).toBe('0');
  });

  it('answers 400 naming the field for a bad freeze mode, an auto-thaw below its minimum and unknown fields', async () => {
    const { mode } = fakeCgroupV2('bad');
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job) });
    for (const [body, field] of [
      [{ freeze: 'everything' }, 'freeze'],
      [{ thaw_after_ms: 99 }, 'thaw_after_ms'],
      [{ thaw_after_ms: 3_600_001 }, 'thaw_after_ms'],
      [{ max_wait_ms: -1 }, 'max_wait_ms'],
      [{ fsfreez: true }, 'fsfreez'],
    ] as const) {
      const answer = await server.json('POST', '/snapshot/prepare', body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      expect(answer.body.message).toContain(field);
    }
  });
});

describe('POST /snapshot/prepare without cgroup v2', () => {
  const v1Layout = () => {
    const root = join(dir, 'v1');
    mkdirSync(join(root, 'memory'), { recursive: true });
    return openCgroups({ root, selfCgroup: '4:memory:/\n0::/\n', memTotal: 1 << 30 }, undefined);
  };

  it('answers 409 for freeze "commands" and "all" on a cgroup v1 layout, and prepares with "none"', async () => {
    const { job } = recorder();
    server = await startServer({}, { cgroups: v1Layout(), machine: machine(job) });
    for (const freeze of [undefined, 'commands', 'all']) {
      const { status, body } = await server.json('POST', '/snapshot/prepare', freeze === undefined ? {} : { freeze });
      expect(status).toBe(409);
      expect(body.message).toMatch(/cgroup v2.*"none"/);
    }
    expect((await server.json('POST', '/snapshot/prepare', { freeze: 'none' })).status).toBe(200);
  });

  // This machine's own layout, where it is v1 or hybrid (the development machine is hybrid): detection only, nothing written.
  it.runIf(!existsSync('/sys/fs/cgroup/cgroup.controllers'))('answers 409 for a freeze on this hybrid cgroup v1 machine', async () => {
    const mode = openCgroups(systemLocation(), undefined);
    expect(mode.mode).toBe('proc');
    server = await startServer({}, { cgroups: mode, machine: machine(recorder().job) });
    const { status, body } = await server.json('POST', '/snapshot/prepare', { freeze: 'commands' });
    expect(status).toBe(409);
    expect(body.message).toMatch(/cgroup v1 or hybrid/);
  });
});
