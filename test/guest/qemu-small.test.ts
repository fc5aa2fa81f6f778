import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootGuest, type BootedGuest } from './boot.js';
import { run, waitForHealth, type EnvdClient } from './client.js';
import { IMAGE_FILE } from './paths.js';
import type { QemuGuest } from './qemu.js';

// envd in the smallest sandbox it is meant for: a 512 MiB VM where a user process takes
// 300 MiB while eight verbose background commands print and nobody reads them.
const BOOT_TIMEOUT_MS = 240_000;
const MIB = 1024 * 1024;
const VERBOSE = 8;
const VERBOSE_BYTES = 100_000_000;
const BUDGET = 64 * MIB;

describe('envd in a 512 MiB qemu VM under output storms', () => {
  let guest: BootedGuest | undefined;
  let vm: QemuGuest | undefined;
  let client: EnvdClient;

  beforeAll(async () => {
    guest = await bootGuest({ image: IMAGE_FILE, name: 'small', bootTimeoutMs: BOOT_TIMEOUT_MS, init: { default_user: 'user' } });
    ({ vm, client } = guest);
  });

  afterAll(async () => {
    await guest?.stop();
  });

  it('keeps the user process alive and its own RSS within budget, and wait still returns the output', async () => {
    try {
      await storm();
    } catch (error) {
      // What the guest saw, for the report: envd's journal and the kernel's last words.
      await waitForHealth(vm!.url, 60_000, vm!.alive).catch(() => undefined);
      const logs = await run(client, 'journalctl -u envd --no-pager | tail -40; dmesg | tail -40; free -m', { user: 'root' }).catch((e: Error) => ({ stdout: `no logs: ${e.message}` }));
      console.log(`qemu 512 MiB: the storm failed; guest logs:\n${logs.stdout}`);
      throw error;
    }
  });

  async function storm(): Promise<void> {
    await new Promise((r) => setTimeout(r, 3_000));
    const rss = async () => (await client.json('GET', '/metrics')).body.envd_rss_bytes as number;
    const idle = await rss();
    // 300 MiB allocated once and every page touched (perl's `x` operator would build a second copy).
    const touch300 = 'my $x = ""; vec($x, 300 * 1048576 - 1, 8) = 1; for (my $i = 0; $i < length $x; $i += 4096) { vec($x, $i, 8) = 1 } sleep 3600';
    const hog = (await client.json('POST', '/commands', { cmd: `exec perl -e '${touch300}'`, background: true })).body.pid as number;
    await new Promise((r) => setTimeout(r, 5_000));
    const pids: number[] = [];
    for (let i = 0; i < VERBOSE; i++) {
      const started = await client.json('POST', '/commands', { cmd: `yes "verbose command ${i} prints a line of text" | head -c ${VERBOSE_BYTES}`, background: true });
      expect(started.status).toBe(200);
      pids.push(started.body.pid);
    }
    let peak = idle;
    const t = Date.now();
    for (;;) {
      peak = Math.max(peak, await rss());
      const listed = (await client.json('GET', '/commands')).body.processes as { pid: number; running: boolean }[];
      if (listed.filter((p) => pids.includes(p.pid) && !p.running).length === VERBOSE) break;
      if (Date.now() - t > 600_000) throw new Error('the verbose commands did not finish in 10 minutes');
      await new Promise((r) => setTimeout(r, 500));
    }
    const metrics = (await client.json('GET', '/metrics')).body;
    console.log(
      `qemu 512 MiB: ${VERBOSE} × ${VERBOSE_BYTES / 1e6} MB unread in ${((Date.now() - t) / 1000).toFixed(0)} s; envd RSS idle ${(idle / MIB).toFixed(1)} MiB, peak ${(peak / MIB).toFixed(1)} MiB (+${((peak - idle) / MIB).toFixed(1)}); ` +
        `kept ${(metrics.output_memory_bytes / MIB).toFixed(1)} MiB in memory, ${(metrics.output_spool_bytes / MIB).toFixed(1)} MiB spooled; guest memory used ${metrics.mem_used_mib} of ${metrics.mem_total_mib} MiB`,
    );
    expect(peak - idle).toBeLessThanOrEqual(BUDGET);

    // The user's 300 MiB process lived through it, and the kernel killed nobody.
    expect((await run(client, `kill -0 ${hog} && echo alive`, { user: 'root' })).stdout).toBe('alive\n');
    expect((await run(client, 'dmesg | grep -ci "out of memory\\|killed process" || true', { user: 'root' })).stdout.trim()).toBe('0');

    // The seed's promise: background → wait → the output (up to the per-stream cap, or what the budgets kept).
    const waited = await client.call('GET', `/commands/${pids[0]}/wait`);
    expect(waited.status).toBe(200);
    const result = (await waited.json()) as { stdout: string; exit_code: number; stdout_truncated?: boolean };
    expect(result.exit_code).toBe(0);
    expect(result.stdout.length).toBeGreaterThan(MIB);
    expect(result.stdout.startsWith('verbose command 0 prints a line of text\n'.repeat(100))).toBe(true);
    console.log(`qemu 512 MiB: wait returned ${(result.stdout.length / MIB).toFixed(1)} MiB of stdout${result.stdout_truncated ? ' (truncated)' : ''}; envd RSS after ${((await rss()) / MIB).toFixed(1)} MiB`);
    for (const pid of [...pids.slice(1), hog]) await client.json('DELETE', `/commands/${pid}`);
  }
});
