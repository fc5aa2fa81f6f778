import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freezeTargets, ownCgroup, setFrozen, waitFrozen } from '../../src/snapshot/cgroup-freezer.js';

// A directory laid out like cgroupfs (as test/cgroups does): the freezer's
// choices and its read-back, with the test playing the kernel's part.

const root = mkdtempSync(join(tmpdir(), 'envd-freezer-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function tree(name: string, cgroups: string[]): string {
  const base = join(root, name);
  for (const cgroup of cgroups) {
    mkdirSync(join(base, cgroup), { recursive: true });
    writeFileSync(join(base, cgroup, 'cgroup.events'), 'populated 1\nfrozen 0\n');
  }
  return base;
}

describe('freezeTargets', () => {
  const systemd = tree('systemd', [
    'envd-commands/0123456789abcdef',
    'init.scope',
    'system.slice/envd.service',
    'system.slice/cron.service',
    'system.slice/systemd-journald.service',
    'user.slice/user-0.slice',
  ]);

  it('freezes the commands\' parent for "commands", so every command and service below it goes with one write', () => {
    expect(freezeTargets('commands', systemd, join(systemd, 'envd-commands'), '/system.slice/envd.service')).toEqual([join(systemd, 'envd-commands')]);
  });

  it('freezes nothing for "none", and nothing for "commands" before the first command made the parent', () => {
    expect(freezeTargets('none', systemd, join(systemd, 'envd-commands'), '')).toEqual([]);
    expect(freezeTargets('commands', systemd, join(systemd, 'no-commands-yet'), '')).toEqual([]);
  });

  it('freezes for "all" every sibling of envd\'s ancestors, never envd\'s own cgroup, PID 1\'s or the journal\'s', () => {
    const targets = freezeTargets('all', systemd, join(systemd, 'envd-commands'), '/system.slice/envd.service').map((path) => path.slice(systemd.length + 1));
    expect(targets.sort()).toEqual(['envd-commands', 'system.slice/cron.service', 'user.slice']);
  });

  it('freezes for "all" every child of the root when envd runs in the root (under envd-init)', () => {
    const init = tree('init', ['envd-commands/0123456789abcdef', 'other']);
    const targets = freezeTargets('all', init, join(init, 'envd-commands'), ownCgroup('0::/\n'));
    expect(targets.map((path) => path.slice(init.length + 1)).sort()).toEqual(['envd-commands', 'other']);
  });

  it("reads envd's own cgroup from /proc/self/cgroup, among v1 lines", () => {
    expect(ownCgroup('12:pids:/x\n0::/system.slice/envd.service\n')).toBe('system.slice/envd.service');
    expect(ownCgroup('0::/\n')).toBe('');
  });
});

describe('setFrozen and waitFrozen', () => {
  it('writes cgroup.freeze, skips a cgroup that vanished, and counts what read back frozen', async () => {
    const base = tree('wait', ['a', 'b']);
    const [a, b] = [join(base, 'a'), join(base, 'b')];
    expect(await setFrozen([a, b, join(base, 'gone')], true)).toEqual([a, b]);
    expect(readFileSync(join(a, 'cgroup.freeze'), 'utf8')).toBe('1');
    // The kernel confirms a at once and b a little later.
    writeFileSync(join(a, 'cgroup.events'), 'populated 1\nfrozen 1\n');
    setTimeout(() => writeFileSync(join(b, 'cgroup.events'), 'populated 1\nfrozen 1\n'), 50);
    expect(await waitFrozen([a, b], 5_000)).toEqual({ frozen: 2, unconfirmed: 0 });
    await setFrozen([a, b], false);
    expect(readFileSync(join(b, 'cgroup.freeze'), 'utf8')).toBe('0');
  });

  it('gives up after max_wait_ms and reports the cgroups that never read back frozen as unconfirmed', async () => {
    const base = tree('stuck', ['stuck', 'done']);
    writeFileSync(join(base, 'done', 'cgroup.events'), 'frozen 1\n');
    const started = performance.now();
    expect(await waitFrozen([join(base, 'stuck'), join(base, 'done')], 100)).toEqual({ frozen: 1, unconfirmed: 1 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(95);
  });

  it('counts a cgroup removed while it was awaited (its command ended) as confirmed: nothing runs in it', async () => {
    const base = tree('removed', ['x']);
    setTimeout(() => rmSync(join(base, 'x'), { recursive: true }), 30);
    expect(await waitFrozen([join(base, 'x')], 5_000)).toEqual({ frozen: 1, unconfirmed: 0 });
  });
});
