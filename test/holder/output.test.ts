import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { encodeStdin } from '../../src/holder/protocol.js';
import {
  afterThisTest,
  holderMemory,
  makeTempRoot,
  parseLog,
  readLog,
  readStatus,
  segmentPaths,
  startHolder,
  usageSlot,
  useHolders,
  type RunningHolder,
} from '../helpers/holder.js';
import { isRoot } from '../helpers/users.js';
import { waitFor } from '../helpers/proc.js';

useHolders();

const finished = async (holder: RunningHolder) => {
  expect(await holder.exited).toBe(0);
  return { status: readStatus(holder.dir)!, log: parseLog(readLog(holder.dir)) };
};

/** Mounts a tmpfs of the given size (root only) and unmounts it after the test. */
function mountTmpfs(size: string): string {
  const dir = join(makeTempRoot(), 'tmpfs');
  mkdirSync(dir);
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'tmpfs', dir]);
  afterThisTest(() => {
    execFileSync('umount', [dir]);
  });
  return dir;
}

describe('envd-holder kept output', () => {
  it('keeps stdout and stderr as frames in the order they were read, in one memory segment', async () => {
    const holder = await startHolder({ command: ['sh', '-c', 'echo out1; sleep 0.1; echo err1 >&2; sleep 0.1; echo out2; sleep 0.1; printf err2 >&2'] });
    const { status, log } = await finished(holder);
    expect(log.frames.map((f) => [f.stream, f.bytes.toString()])).toEqual([
      ['stdout', 'out1\n'],
      ['stderr', 'err1\n'],
      ['stdout', 'out2\n'],
      ['stderr', 'err2'],
    ]);
    expect(log.leftover).toBe(0);
    expect(segmentPaths(holder.dir)).toEqual([join(holder.dir, 'log.0')]);
    expect(status).toEqual({ exitCode: 0, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: 4 * 5 + 19 });
    expect(usageSlot(holder.usageFile, holder.slot)).toEqual({ memory: 39, spool: 0 });
  });

  it('cuts a stream at its cap on a UTF-8 boundary and marks it truncated in status and EXIT, while DATA carries the whole chunk', async () => {
    // "12345678€xyz": the cap of 10 falls inside the 3-byte €, so 8 bytes are kept.
    const holder = await startHolder({ command: ['sh', '-c', "read x; printf '12345678\\342\\202\\254xyz'; printf ok >&2"], stdin: true, cap: 10 });
    const client = await holder.connect();
    expect((await client.next()).type).toBe('hello');
    client.send(Buffer.from([0x01, 0, 0, 0, 0])); // LIVE_ON
    client.send(encodeStdin(1, Buffer.from('\n')));
    const messages = await client.until('exit');
    const data = messages.filter((m) => m.type === 'data');
    expect(Buffer.concat(data.filter((m) => m.stream === 'stdout').map((m) => m.bytes)).toString()).toBe('12345678€xyz');
    expect(messages.at(-1)).toEqual({ type: 'exit', exitCode: 0, signal: 0, truncated: { stdout: true, stderr: false }, logEnd: 13 + 7 });
    const { status, log } = await finished(holder);
    expect(log.stdout.toString()).toBe('12345678');
    expect(log.stderr.toString()).toBe('ok');
    expect(status.truncated).toEqual({ stdout: true, stderr: false });
  });

  it('keeps output that ends exactly at the cap untruncated', async () => {
    const holder = await startHolder({ command: ['sh', '-c', "printf '12345678\\342\\202\\254'"], cap: 11 });
    const { status, log } = await finished(holder);
    expect(log.stdout.toString()).toBe('12345678€');
    expect(status.truncated).toEqual({ stdout: false, stderr: false });
  });

  it('moves to the spool once all commands together reach the memory budget, listing both segments in order', async () => {
    const budget = 1_000_000;
    const holder = await startHolder({
      command: ['sh', '-c', "printf %500s | tr ' ' a; sleep 0.2; printf %500s | tr ' ' b >&2; sleep 0.2; printf c"],
      memoryBudget: budget,
      // Another command's slot already holds all but 600 bytes: one 505-byte frame fits, the next does not.
      prepareUsage: (usage) => usage.writeBigUInt64LE(BigInt(budget - 600), 100 * 16),
    });
    const { status, log } = await finished(holder);
    const id = basename(holder.dir);
    expect(segmentPaths(holder.dir)).toEqual([join(holder.dir, 'log.0'), join(holder.spoolDir, `${id}.1`)]);
    expect(log.stdout.toString()).toBe(`${'a'.repeat(500)}c`);
    expect(log.stderr.toString()).toBe('b'.repeat(500));
    expect(log.frames.map((f) => f.stream)).toEqual(['stdout', 'stderr', 'stdout']);
    expect(usageSlot(holder.usageFile, holder.slot)).toEqual({ memory: 505, spool: 505 + 6 });
    expect(status).toEqual({ exitCode: 0, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: 505 + 505 + 6 });
  });

  it('drops output past the spool budget, marks it truncated and never blocks the command', async () => {
    const holder = await startHolder({
      command: ['sh', '-c', "head -c 1000000 /dev/zero | tr '\\0' s; exit 0"],
      memoryBudget: 0,
      // Room for at least one whole chunk (frames are kept or dropped whole), far less than the output.
      spoolBudget: 200_000,
      prepareUsage: (usage) => usage.writeBigUInt64LE(50_000n, 9 * 16 + 8), // another command's spool bytes
    });
    const { status, log } = await finished(holder);
    expect(status.exitCode).toBe(0);
    expect(status.truncated).toEqual({ stdout: true, stderr: false });
    expect(status.logEnd).toBeGreaterThan(0);
    expect(status.logEnd).toBeLessThanOrEqual(150_000);
    expect(status.logEnd).toBe(readLog(holder.dir).length);
    expect(log.leftover).toBe(0);
    expect(log.stdout.toString()).toBe('s'.repeat(log.stdout.length));
    expect(usageSlot(holder.usageFile, holder.slot)).toEqual({ memory: 0, spool: status.logEnd });
    expect(segmentPaths(holder.dir)).toEqual([join(holder.spoolDir, `${basename(holder.dir)}.0`)]);
  });

  it('survives a full disk under the spool: nothing torn, the stream truncated, the command finishes', async () => {
    if (!isRoot()) {
      console.warn('SKIPPED: the full-disk test mounts a tmpfs and needs root');
      return;
    }
    const spoolDir = mountTmpfs('1m');
    const holder = await startHolder({
      command: ['sh', '-c', "head -c 3000000 /dev/zero | tr '\\0' f; echo end >&2"],
      memoryBudget: 0,
      spoolBudget: 1 << 30,
      spoolDir,
    });
    const { status, log } = await finished(holder);
    const spooled = readLog(holder.dir);
    expect(status.exitCode).toBe(0);
    expect(status.truncated.stdout).toBe(true);
    expect(status.logEnd).toBe(spooled.length);
    expect(spooled.length).toBeLessThanOrEqual(1 << 20);
    expect(log.leftover).toBe(0);
    expect(log.stdout.length).toBeGreaterThan(0);
    expect(log.stdout.toString()).toBe('f'.repeat(log.stdout.length));
    expect(usageSlot(holder.usageFile, holder.slot).spool).toBe(status.logEnd);
  });

  it('falls back to the spool when the memory tier\'s filesystem is full', async () => {
    if (!isRoot()) {
      console.warn('SKIPPED: the full-memory-tier test mounts a tmpfs and needs root');
      return;
    }
    const stateRoot = mountTmpfs('256k');
    const holder = await startHolder({ command: ['sh', '-c', "head -c 1000000 /dev/zero | tr '\\0' m"], stateRoot });
    const { status, log } = await finished(holder);
    const [memory, spool, ...rest] = segmentPaths(holder.dir);
    expect(memory).toBe(join(holder.dir, 'log.0'));
    expect(spool).toBe(join(holder.spoolDir, `${basename(holder.dir)}.1`));
    expect(rest).toEqual([]);
    expect(status).toEqual({ exitCode: 0, signal: 0, truncated: { stdout: false, stderr: false }, logEnd: readLog(holder.dir).length });
    expect(log.leftover).toBe(0);
    expect(log.stdout.toString()).toBe('m'.repeat(1_000_000));
  });

  it('reads a command printing as fast as it can without growing (RSS measured under yes)', async () => {
    const holder = await startHolder({ command: ['yes'], cap: 1 << 20 });
    await waitFor(() => usageSlot(holder.usageFile, holder.slot).memory > 1 << 20, 5_000, 'the cap to be reached');
    await new Promise((resolve) => setTimeout(resolve, 500));
    const memory = holderMemory(holder.holderPid);
    console.log(`envd-holder under yes (no client, past the cap): VmRSS ${memory.rssKiB} KiB (RssAnon ${memory.anonKiB} KiB)`);
    expect(memory.anonKiB).toBeLessThan(1024);
    process.kill(-holder.shellPid, 'SIGKILL');
    const { status } = await finished(holder);
    expect(status).toMatchObject({ exitCode: -1, signal: 9, truncated: { stdout: true, stderr: false } });
  });
});
