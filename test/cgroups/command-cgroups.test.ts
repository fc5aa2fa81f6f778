// The cgroup code against a directory laid out like cgroupfs (issue 26): what
// envd writes where, how it reads why a command ended and what it used, and
// when it falls back to the /proc walk. The real kernel's behaviour is proven
// in the qemu guest (test/guest/qemu-cgroups.test.ts).
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CommandCgroups } from '../../src/cgroups/command-cgroups.js';
import { openCgroups } from '../../src/cgroups/detect.js';

const MIB = 1024 * 1024;
let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'envd-cgroupfs-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A cgroup2 mount with the memory, pids, cpu and io controllers. */
function layOut(): string {
  writeFileSync(join(root, 'cgroup.controllers'), 'cpuset cpu io memory hugetlb pids rdma misc\n');
  writeFileSync(join(root, 'cgroup.subtree_control'), '');
  return root;
}

const read = (...path: string[]) => readFileSync(join(...path), 'utf8');
const SELF = '0::/system.slice/envd.service\n';

describe('openCgroups', () => {
  it("sets up the commands' subtree beside envd: memory, pids and cpu for them, their memory capped", () => {
    layOut();
    const mode = openCgroups({ root, selfCgroup: SELF, memTotal: 512 * MIB }, 128 * MIB);
    expect(mode.mode).toBe('cgroup');
    expect(read(root, 'cgroup.subtree_control')).toBe('+memory +pids +cpu');
    expect(read(root, 'envd-commands/cgroup.subtree_control')).toBe('+memory +pids +cpu');
    expect(read(root, 'envd-commands/memory.max')).toBe(String(384 * MIB));
    expect(read(root, 'envd-commands/memory.swap.max')).toBe('0');
  });

  it('finds the same subtree again after a restart, and leaves the memory uncapped without a reserve', () => {
    layOut();
    openCgroups({ root, selfCgroup: SELF, memTotal: 512 * MIB }, 128 * MIB);
    const again = openCgroups({ root, selfCgroup: SELF, memTotal: 512 * MIB }, undefined);
    expect(again.mode === 'cgroup' && again.cgroups.commands).toBe(join(root, 'envd-commands'));
  });

  it('falls back to the /proc walk, saying why, on a cgroup v1 or hybrid host, outside any v2 cgroup, or where it may not write', () => {
    expect(openCgroups({ root, selfCgroup: '0::/\n', memTotal: 0 }, 0)).toEqual({ mode: 'proc', why: `cgroup v2 is not the unified hierarchy at ${root} (a cgroup v1 or hybrid host)` });
    layOut();
    expect(openCgroups({ root, selfCgroup: '1:name=systemd:/x\n', memTotal: 0 }, 0)).toMatchObject({ mode: 'proc', why: expect.stringContaining('no 0:: line') });
    // Where the hierarchy cannot be written (a file stands where the commands' parent would go).
    writeFileSync(join(root, 'envd-commands'), '');
    expect(openCgroups({ root, selfCgroup: SELF, memTotal: 0 }, 0)).toMatchObject({ mode: 'proc', why: expect.stringMatching(/is not writable by envd \((EEXIST|ENOTDIR)\)/) });
  });
});

describe('a command cgroup', () => {
  function cgroups(): CommandCgroups {
    layOut();
    const mode = openCgroups({ root, selfCgroup: SELF, memTotal: 512 * MIB }, 0);
    if (mode.mode !== 'cgroup') throw new Error(mode.why);
    return mode.cgroups;
  }

  it('gets its limits before the command starts: memory without swap, pids, cpu as a quota of 100 ms periods', () => {
    const c = cgroups();
    const path = c.create('abc', { memory_bytes: 64 * MIB, pids: 64, cpu: 0.5 });
    expect(read(path, 'memory.max')).toBe(String(64 * MIB));
    expect(read(path, 'memory.swap.max')).toBe('0');
    expect(read(path, 'pids.max')).toBe('64');
    expect(read(path, 'cpu.max')).toBe('50000 100000');
    expect(read(c.create('tiny', { cpu: 0.001 }), 'cpu.max')).toBe('1000 100000');
  });

  it('is killed through cgroup.kill', () => {
    const c = cgroups();
    const path = c.create('k', undefined);
    expect(c.kill('k')).toBe(true);
    expect(read(path, 'cgroup.kill')).toBe('1');
    expect(c.kill('missing')).toBe(false);
  });

  it('says whether the OOM killer or pids.max ended it, and what it used', () => {
    const c = cgroups();
    const path = c.create('x', undefined);
    expect(c.end('x')).toEqual({ oomKilled: false, pidsExhausted: false });
    writeFileSync(join(path, 'memory.events'), 'low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n');
    writeFileSync(join(path, 'pids.events'), 'max 3\n');
    expect(c.end('x')).toEqual({ oomKilled: true, pidsExhausted: true });
    writeFileSync(join(path, 'cpu.stat'), 'usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n');
    writeFileSync(join(path, 'memory.current'), '1048576\n');
    writeFileSync(join(path, 'memory.peak'), '4194304\n');
    writeFileSync(join(path, 'pids.current'), '3\n');
    expect(c.stats('x')).toEqual({ cpu_usec: 2500, memory_bytes: MIB, memory_peak_bytes: 4 * MIB, pids: 3 });
    rmSync(join(path, 'memory.peak'));
    expect(c.stats('x').memory_peak_bytes).toBeNull();
  });

  it('is removed once empty, and kept while processes are left in it', () => {
    const c = cgroups();
    const path = c.create('r', undefined);
    writeFileSync(join(path, 'cgroup.events'), 'populated 1\nfrozen 0\n');
    expect(c.remove('r')).toBe(false);
    expect(c.exists('r')).toBe(true);
    writeFileSync(join(path, 'cgroup.events'), 'populated 0\nfrozen 0\n');
    expect(c.remove('r')).toBe(true);
    expect(c.exists('r')).toBe(false);
    expect(c.remove('r')).toBe(true);
  });
});

// Issue 36 item 18: a cgroup whose removal failed once (a straggler still in it) is
// tried again, a bounded number of times; start-up sweeps what no command record owns.
describe('leaked command cgroups', () => {
  const ID = (n: number) => n.toString(16).padStart(16, '0');
  function cgroups(delays: number[]): CommandCgroups {
    layOut();
    return CommandCgroups.setUp(root, undefined, delays);
  }
  const busy = (path: string, populated: boolean) => writeFileSync(join(path, 'cgroup.events'), `populated ${populated ? 1 : 0}\nfrozen 0\n`);
  const until = async (check: () => boolean) => {
    for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  };

  it('tries a busy removal again, and removes the cgroup once its last process has left', async () => {
    const c = cgroups([20, 20, 20, 20, 20]);
    const path = c.create(ID(1), undefined);
    busy(path, true);
    expect(c.remove(ID(1))).toBe(false);
    expect(c.pendingRemovals).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(c.exists(ID(1))).toBe(true); // still busy at the first retry
    busy(path, false);
    await until(() => !c.exists(ID(1)));
    expect(c.exists(ID(1))).toBe(false);
    expect(c.pendingRemovals).toBe(0);
  });

  it('gives up after the last retry, leaving the cgroup to the next sweep', async () => {
    const c = cgroups([5, 5, 5]);
    busy(c.create(ID(2), undefined), true);
    expect(c.remove(ID(2))).toBe(false);
    expect(c.remove(ID(2))).toBe(false); // a second failed removal does not start a second chain
    expect(c.pendingRemovals).toBe(1);
    await until(() => c.pendingRemovals === 0);
    expect(c.pendingRemovals).toBe(0);
    expect(c.exists(ID(2))).toBe(true);
  });

  it("sweeps the command cgroups no record owns, and nothing that is not envd's", async () => {
    const c = cgroups([5]);
    const kept = c.create(ID(10), undefined);
    c.create(ID(11), undefined); // a crashed envd's, empty
    busy(c.create(ID(12), undefined), true); // a straggler still runs in it
    mkdirSync(join(c.commands, 'not-a-command')); // someone else's, in envd's parent
    mkdirSync(join(c.commands, 'ABCDEF0123456789')); // not an id envd makes (upper case)
    writeFileSync(join(c.commands, ID(13)), ''); // a file, not a cgroup
    mkdirSync(join(root, 'system.slice')); // outside envd's parent
    expect(c.sweep(new Set([ID(10)]))).toBe(1);
    expect(readdirSync(c.commands).sort()).toEqual(expect.arrayContaining([ID(10), ID(12), ID(13), 'ABCDEF0123456789', 'not-a-command']));
    expect(c.exists(ID(11))).toBe(false);
    expect(existsSync(kept)).toBe(true);
    expect(existsSync(join(root, 'system.slice'))).toBe(true);
    expect(c.pendingRemovals).toBe(1); // the busy one, retried
    await until(() => c.pendingRemovals === 0);
  });
});
