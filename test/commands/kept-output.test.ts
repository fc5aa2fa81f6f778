import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { makeEnvdDirs, startServer, type TestServer } from '../helpers/server.js';
import { waitFor } from '../helpers/proc.js';
import { isRoot } from '../helpers/users.js';

// Kept output (for wait and attach replay) lives outside envd: in memory (the state dir) up to
// --output-memory-bytes over all commands, then in the spool up to --max-spool-bytes, then dropped.

const MiB = 1024 * 1024;
let user: Awaited<ReturnType<typeof commandUser>>;
let dirs: ReturnType<typeof makeEnvdDirs>;
let server: TestServer | undefined;

beforeAll(async () => {
  user = await commandUser();
});
afterAll(() => user?.remove());
afterEach(async () => {
  await server?.close();
  server = undefined;
  dirs?.remove();
});

const start = async (budgets: { outputMemoryBytes: number; maxSpoolBytes: number; maxOutputBytes?: number }, spoolDir?: string) => {
  dirs = makeEnvdDirs();
  // Freed once waited (--keep-finished 0): each test measures the budgets from empty.
  server = await startServer({ defaultUser: user.user.name, stateDir: dirs.stateDir, spoolDir: spoolDir ?? dirs.spoolDir, keepFinishedMs: 0, ...budgets });
  return server;
};
/** `bytes` of a repeating, recognisable pattern, on stdout. */
const printing = (bytes: number, letter = 'a') => `head -c ${bytes} /dev/zero | tr '\\0' '${letter}'`;
const metrics = async () => (await server!.json('GET', '/metrics')).body;
const spoolFiles = () => readdirSync(dirs.spoolDir);

describe('kept output', () => {
  it('stays in memory under the budget: no spool file, and wait returns it', async () => {
    await start({ outputMemoryBytes: 4 * MiB, maxSpoolBytes: 64 * MiB });
    const pid = (await server!.json('POST', '/commands', { cmd: printing(MiB), background: true })).body.pid;
    await new Promise((r) => setTimeout(r, 500));
    expect(spoolFiles()).toEqual([]);
    expect((await metrics()).output_memory_bytes).toBeGreaterThanOrEqual(MiB);
    const { body } = await server!.json('GET', `/commands/${pid}/wait`);
    expect(body.stdout).toBe('a'.repeat(MiB));
    expect(body.stdout_truncated).toBeUndefined();
    // Waited for: nothing left in either tier (removed once the answer has been read out of it).
    await waitFor(() => readdirSync(join(dirs.stateDir, 'cmds')).length === 0, 5_000, 'the command\'s files to go');
    expect((await metrics()).output_memory_bytes).toBe(0);
  });

  it('moves past the memory budget to the spool (files only envd can read) and wait returns all of it in order', async () => {
    await start({ outputMemoryBytes: MiB, maxSpoolBytes: 64 * MiB });
    const pid = (await server!.json('POST', '/commands', { cmd: `${printing(2 * MiB, 'a')}; echo middle >&2; ${printing(2 * MiB, 'b')}`, background: true })).body.pid;
    const { body } = await server!.json('GET', `/commands/${pid}/wait`).then(async (r) => r);
    expect(body.stdout).toBe('a'.repeat(2 * MiB) + 'b'.repeat(2 * MiB));
    expect(body.stderr).toBe('middle\n');
    expect(body.stdout_truncated).toBeUndefined();
    await waitFor(() => spoolFiles().length === 0, 5_000, 'the spool files to go');
  });

  it('keeps the spool private and lists both tiers while the command is tracked', async () => {
    await start({ outputMemoryBytes: MiB, maxSpoolBytes: 64 * MiB });
    const pid = (await server!.json('POST', '/commands', { cmd: `${printing(3 * MiB)}; sleep 1000`, background: true })).body.pid;
    await new Promise((r) => setTimeout(r, 1000));
    const [file] = spoolFiles();
    expect(file).toBeDefined();
    expect(statSync(join(dirs.spoolDir, file!)).mode & 0o777).toBe(0o600);
    expect(statSync(dirs.spoolDir).mode & 0o777).toBe(0o700);
    const figures = await metrics();
    expect(figures.output_memory_bytes).toBeLessThanOrEqual(MiB);
    expect(figures.output_spool_bytes).toBeGreaterThan(2 * MiB - 100_000);
    expect((await server!.json('DELETE', `/commands/${pid}`)).body).toEqual({ killed: true });
    expect(spoolFiles()).toEqual([]);
    expect((await metrics()).output_spool_bytes).toBe(0);
  });

  it('drops output past the spool budget, sets the truncation flag, and never blocks the command', async () => {
    await start({ outputMemoryBytes: 512 * 1024, maxSpoolBytes: MiB });
    const pid = (await server!.json('POST', '/commands', { cmd: `${printing(8 * MiB)}; echo done >&2; exit 4`, background: true })).body.pid;
    const { body } = await server!.json('GET', `/commands/${pid}/wait`);
    expect(body.exit_code).toBe(4);
    expect(body.stdout_truncated).toBe(true);
    expect(body.stdout.length).toBeGreaterThan(MiB);
    expect(body.stdout.length).toBeLessThan(1.6 * MiB);
    expect(body.stdout).toBe('a'.repeat(body.stdout.length));
  });

  it('shares one memory budget between commands', async () => {
    await start({ outputMemoryBytes: 2 * MiB, maxSpoolBytes: 64 * MiB });
    const pids: number[] = [];
    for (let i = 0; i < 6; i++) pids.push((await server!.json('POST', '/commands', { cmd: `${printing(MiB, String.fromCharCode(97 + i))}; sleep 1000`, background: true })).body.pid);
    await new Promise((r) => setTimeout(r, 1500));
    const figures = await metrics();
    // One 64 KiB chunk of slack per command racing for the last of the budget.
    expect(figures.output_memory_bytes).toBeLessThanOrEqual(2 * MiB + 6 * 65 * 1024);
    expect(figures.output_memory_bytes + figures.output_spool_bytes).toBeGreaterThanOrEqual(6 * MiB);
    for (const [i, pid] of pids.entries()) {
      await server!.json('POST', `/commands/${pid}/signal`, { signal: 'SIGKILL' });
      const { body } = await server!.json('GET', `/commands/${pid}/wait`);
      expect(body.stdout).toBe(String.fromCharCode(97 + i).repeat(MiB));
    }
  });

  it('truncates instead of failing when the disk under the spool is full', async () => {
    if (!isRoot()) return console.warn('SKIPPED (needs root to mount a tmpfs): disk full under the spool');
    const full = join(makeEnvdDirs().root, 'full');
    mkdirSync(full);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', full]);
    try {
      await start({ outputMemoryBytes: 256 * 1024, maxSpoolBytes: 64 * MiB }, full);
      const { body } = await server!.json('POST', '/commands', { cmd: `${printing(4 * MiB)}; exit 2` });
      expect(body.exit_code).toBe(2);
      expect(body.stdout_truncated).toBe(true);
      expect(body.stdout).toBe('a'.repeat(body.stdout.length));
      expect(body.stdout.length).toBeGreaterThan(256 * 1024);
    } finally {
      await server?.close();
      server = undefined;
      execFileSync('umount', [full]);
      execFileSync('rm', ['-rf', join(full, '..')]);
    }
  });

  it('cleans orphaned spool files at start (a crash between a command\'s end and its cleanup)', async () => {
    dirs = makeEnvdDirs();
    mkdirSync(dirs.spoolDir, { recursive: true });
    execFileSync('sh', ['-c', `head -c 1000 /dev/zero > ${join(dirs.spoolDir, '0123456789abcdef.1')}`]);
    server = await startServer({ defaultUser: user.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    expect(spoolFiles()).toEqual([]);
  });
});
