import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProcessRegistry } from '../../src/commands/registry.js';
import { prepareCommand } from '../../src/commands/spawn.js';
import { createLogger } from '../../src/logger.js';
import { SandboxState } from '../../src/sandbox-state.js';
import { testConfig } from '../helpers/server.js';
import { commandUser } from '../helpers/command-user.js';

let fixture: Awaited<ReturnType<typeof commandUser>>;
beforeAll(async () => {
  fixture = await commandUser();
});
afterAll(() => fixture?.remove());

describe('ProcessRegistry', () => {
  it('keeps at most the configured number of finished unwaited background commands, forgetting the oldest', async () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (chunk, _encoding, done) => (lines.push(String(chunk)), done()) });
    const config = testConfig();
    const registry = new ProcessRegistry(config, createLogger('info', sink), { maxFinishedBackground: 3 });
    const state = new SandboxState(config, fixture.user.name);
    const running = await registry.start(await prepareCommand({ cmd: 'sleep 1000' }, state), { background: true, timeoutMs: 0 });
    const started = [];
    for (let i = 0; i < 5; i++) {
      const proc = await registry.start(await prepareCommand({ cmd: `exit ${i}` }, state), { background: true, timeoutMs: 0 });
      await proc.finished;
      started.push(proc.pid);
    }
    // The newest three finished ones stay, and a running one is never evicted.
    expect(registry.list().map((p) => p.pid)).toEqual([running.pid, ...started.slice(2)]);
    expect(lines.filter((line) => line.includes('too many kept'))).toHaveLength(2);
    await registry.killAll();
    expect(running.running).toBe(false);
  });

  it('forgets foreground commands once they finish', async () => {
    const config = testConfig();
    const registry = new ProcessRegistry(config, createLogger('silent'));
    const proc = await registry.start(await prepareCommand({ cmd: 'echo hi' }, new SandboxState(config, fixture.user.name)), { background: false, timeoutMs: 0 });
    expect(registry.get(proc.pid)).toBe(proc);
    await proc.finished;
    await new Promise((r) => setImmediate(r));
    expect(registry.size).toBe(0);
    expect(proc.result()).toEqual({ stdout: 'hi\n', stderr: '', exit_code: 0 });
  });
});
