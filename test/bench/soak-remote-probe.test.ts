import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error: the bench is plain ESM JavaScript with no type declarations.
import { startEnvd } from '../../bench/lib/envd-process.mjs';
// @ts-expect-error: as above.
import { descriptors, kept, processes, startLocalProbe, total } from '../../bench/lib/soak-probe.mjs';
// @ts-expect-error: as above.
import { startRemoteProbe } from '../../bench/lib/soak-remote-probe.mjs';
// @ts-expect-error: as above.
import { send } from '../../bench/lib/client.mjs';

// The soak's probe of an envd in a guest (bench/guest-soak.mjs) reads it from
// inside its machine through envd's own POST /commands. Pointed at a local
// dist/envd, it must report what the local probe reads from /proc, its own
// commands left out, or the guest soak would judge the wrong figures.
const MIB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('the soak probe of an envd on another machine', () => {
  let envd: any;
  let dir: string;
  let remote: any;

  beforeAll(async () => {
    envd = await startEnvd({ executable: true });
    dir = mkdtempSync(join(tmpdir(), 'envd-soak-remote-'));
    remote = await startRemoteProbe({ host: '127.0.0.1', port: envd.port, token: envd.token }, { pid: envd.pid, stateDir: envd.stateDir, spoolDir: envd.spoolDir, dir });
  }, 60_000);

  afterAll(async () => {
    await remote?.stop();
    await envd?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads the memory the local probe reads, with the peak and low of 100 ms samples between two reads', async () => {
    await remote.sample();
    await sleep(1_000);
    const local = startLocalProbe(envd);
    const [there, here] = [await remote.sample(), await local.sample()];
    await local.stop();
    expect(there.samples).toBeGreaterThanOrEqual(3);
    expect(there.peakRss).toBeGreaterThanOrEqual(there.lowRss);
    expect(there.peakRss).toBeGreaterThanOrEqual(there.rss);
    expect(there.lowRss).toBeLessThanOrEqual(there.rss);
    // Read a few milliseconds apart, with the probe's own command in flight between them.
    expect(Math.abs(there.rss - here.rss)).toBeLessThan(8 * MIB);
    expect(Math.abs(there.anon - here.anon)).toBeLessThan(8 * MIB);
  });

  it('counts the processes and holders of envd\'s commands, its own command and sampler left out', async () => {
    const before = await remote.sample();
    expect(before.procs).toEqual({ ...processes(envd.pid, envd.stateDir), count: processes(envd.pid, envd.stateDir).count - 2, holders: 0 });
    const started = await send(envd, 'POST', '/commands', { body: { cmd: 'sleep 60 & sleep 60; wait', background: true } });
    expect(started.status).toBe(200);
    const { pid } = JSON.parse(started.body);
    await sleep(300);
    const during = await remote.sample();
    // A holder, its shell and the two sleeps.
    expect(during.procs).toEqual({ count: before.procs.count + 4, holders: 1, zombies: 0 });
    expect(during.kept.stateDirs).toBe(before.kept.stateDirs + 1);
    await send(envd, 'DELETE', `/commands/${pid}`);
    await sleep(300);
    const after = await remote.sample();
    expect(after.procs).toEqual(before.procs);
  });

  it('counts envd\'s descriptors by kind as the local probe does', async () => {
    const there = await remote.sample();
    const here = descriptors(envd.pid);
    expect(Object.keys(there.fds).sort()).toEqual(Object.keys(here).sort());
    // The probe's own request and command hold a few sockets and pipes while it reads.
    expect(Math.abs(total(there.fds) - total(here))).toBeLessThanOrEqual(6);
    expect(there.kept.spoolFiles).toBe(kept(envd.stateDir, envd.spoolDir).spoolFiles);
  });
});
