import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProcessRegistry } from '../../src/commands/registry.js';
import { prepareCommand } from '../../src/commands/spawn.js';
import { createLogger } from '../../src/logger.js';
import { SandboxState } from '../../src/sandbox-state.js';
import { commandUser } from '../helpers/command-user.js';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { makeEnvdDirs, testConfig } from '../helpers/server.js';

let fixture: Awaited<ReturnType<typeof commandUser>>;
beforeAll(async () => {
  fixture = await commandUser();
});
afterAll(() => fixture?.remove());

describe('ProcessRegistry', () => {
  it('keeps at most the configured number of finished commands, freeing those that ended first', async () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (chunk, _encoding, done) => (lines.push(String(chunk)), done()) });
    const dirs = makeEnvdDirs();
    const config = testConfig({ stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    const registry = await ProcessRegistry.open(config, createLogger('info', sink), { maxFinishedKept: 3 });
    try {
      const state = new SandboxState(config, fixture.user.name);
      const running = await registry.start(await prepareCommand({ cmd: 'sleep 1000' }, state), { background: true, timeoutMs: 0 });
      const started = [];
      for (let i = 0; i < 5; i++) {
        const proc = await registry.start(await prepareCommand({ cmd: `exit ${i}` }, state), { background: true, timeoutMs: 0 });
        await proc.finished;
        started.push(proc.pid);
      }
      await new Promise((r) => setTimeout(r, 50));
      // The newest three finished ones stay, and a running one is never evicted.
      expect(registry.list().map((p) => p.pid)).toEqual([running.pid, ...started.slice(2)]);
      expect(lines.filter((line) => line.includes('too many kept'))).toHaveLength(2);
      await registry.killAll();
      expect(running.running).toBe(false);
      // Everything the commands kept is gone with them.
      expect(readdirSync(join(dirs.stateDir, 'cmds'))).toEqual([]);
      expect(readdirSync(dirs.spoolDir)).toEqual([]);
    } finally {
      dirs.remove();
    }
  });

  it('kills on shutdown a command whose start was still under way, and starts none after', async () => {
    const dirs = makeEnvdDirs();
    const config = testConfig({ stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    const registry = await ProcessRegistry.open(config, createLogger('silent'));
    const marker = `starting-${randomBytes(4).toString('hex')}`;
    try {
      const state = new SandboxState(config, fixture.user.name);
      // Not awaited: shutdown begins while the holder is being started.
      const starting = registry.start(await prepareCommand({ cmd: `exec -a ${marker} sleep 1000` }, state), { background: true, timeoutMs: 0 });
      const killed = registry.killAll();
      const proc = await starting;
      await killed;
      expect(proc.running).toBe(false);
      await waitFor(() => findProcesses(marker).length === 0, 5_000, 'the command started during shutdown to be gone');
      await expect(registry.start(await prepareCommand({ cmd: 'true' }, state), { background: true, timeoutMs: 0 })).rejects.toMatchObject({ status: 503 });
    } finally {
      dirs.remove();
    }
  });

  it('on open, leaves a newer envd\'s record alone and removes one torn before its holder started', async () => {
    const dirs = makeEnvdDirs();
    const config = testConfig({ stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    const cmds = join(dirs.stateDir, 'cmds');
    const newer = join(cmds, 'aaaaaaaaaaaaaaaa');
    const torn = join(cmds, 'bbbbbbbbbbbbbbbb');
    mkdirSync(newer, { recursive: true });
    mkdirSync(torn, { recursive: true });
    writeFileSync(join(newer, 'meta.json'), JSON.stringify({ v: 99, cmd: 'from the future' }));
    writeFileSync(join(torn, 'meta.json'), '{"v":1,"cmd":"tru');
    const registry = await ProcessRegistry.open(config, createLogger('silent'));
    try {
      expect(registry.list()).toEqual([]);
      expect(readdirSync(cmds)).toEqual(['aaaaaaaaaaaaaaaa']);
    } finally {
      await registry.killAll();
      dirs.remove();
    }
  });
});
