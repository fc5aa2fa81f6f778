import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writableBlockMounts } from '../../src/snapshot/filesystems.js';
import { holderJobs } from '../../src/snapshot/holder-jobs.js';
import { HOLDER_BINARY } from '../helpers/holder.js';
import { startServer } from '../helpers/server.js';

// FIFREEZE for real, on an ext4 image loop-mounted inside this test's
// temporary directory: the only filesystem the test's envd may freeze. Never
// this machine's own: the mount list envd gets is filtered to that mount point
// and checked to hold exactly it before anything runs.

const dir = mkdtempSync(join(tmpdir(), 'envd-fsfreeze-'));
const image = join(dir, 'disk.img');
const mnt = join(dir, 'mnt');
const canMount = process.getuid?.() === 0;

beforeAll(() => {
  if (!canMount) return;
  execFileSync('truncate', ['-s', '32M', image]);
  execFileSync('mkfs.ext4', ['-q', '-F', image]);
  mkdirSync(mnt);
  execFileSync('mount', ['-o', 'loop', image, mnt]);
  mkdirSync(join(mnt, 'spool'));
});

afterAll(() => {
  if (canMount) {
    // A failed test must not leave the image frozen: umount would wait for ever.
    try {
      execFileSync(HOLDER_BINARY, ['--fsthaw', mnt], { stdio: 'ignore' });
    } catch {
      // EINVAL: not frozen, as it should be.
    }
    try {
      execFileSync('umount', [mnt]);
    } catch {
      // Still busy (a timed-out test's holder): detach it now, the kernel unmounts once it lets go.
      execFileSync('umount', ['-l', mnt]);
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

/** The loop mount, and only it. */
async function loopMountOnly() {
  const mounts = writableBlockMounts(readFileSync('/proc/self/mountinfo', 'utf8')).filter((mount) => mount.path === mnt);
  if (mounts.length !== 1) throw new Error(`expected exactly the loop mount ${mnt}, got ${JSON.stringify(mounts)}`);
  return mounts;
}

/** Whether a child writing into the mount finishes within `ms`. */
function writerFinishes(ms: number): Promise<{ finished: boolean; done: Promise<void> }> {
  const child = spawn('sh', ['-c', `echo written > ${join(mnt, 'during-freeze')}`], { stdio: 'ignore' });
  const done = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return Promise.race([done.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms))]).then((finished) => ({ finished, done }));
}

describe.runIf(canMount)('POST /snapshot/prepare { fsfreeze: true } on a loop-mounted ext4 image', () => {
  it('freezes the filesystem, blocks its writers, keeps /health and output answering, and thaws on request', async () => {
    const server = await startServer(
      { spoolDir: join(mnt, 'spool'), outputMemoryBytes: 64 * 1024 },
      { machine: { snapshot: { job: holderJobs(HOLDER_BINARY), mounts: loopMountOnly } } },
    );
    try {
      const prepared = await server.json('POST', '/snapshot/prepare', { freeze: 'none', fsfreeze: true });
      expect(prepared.status).toBe(200);
      expect(prepared.body.fs_frozen).toEqual([mnt]);

      const writer = await writerFinishes(300);
      expect(writer.finished).toBe(false);

      // A command whose output outgrows memory spools to the frozen disk (its holder blocks there), while envd answers.
      // Its start may wait on the frozen disk too (the holder opens its spool file): not awaited until the thaw.
      const starting = server.json('POST', '/commands', { cmd: 'seq', args: ['1', '100000'], background: true });
      for (let i = 0; i < 5; i++) {
        const asked = performance.now();
        expect((await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(2_000) })).status).toBe(200);
        expect(performance.now() - asked).toBeLessThan(1_000);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }

      expect(await server.json('POST', '/snapshot/thaw')).toEqual({ status: 200, body: { thawed: 0, fs_thawed: [mnt], by: 'request' } });
      await writer.done;
      expect(readFileSync(join(mnt, 'during-freeze'), 'utf8')).toBe('written\n');
      const started = await starting;
      expect(started.status).toBe(200);
      const waited = await server.json('GET', `/commands/${started.body.pid}/wait?timeout_ms=20000`);
      expect(waited.status).toBe(200);
      expect(waited.body).toMatchObject({ exit_code: 0 });
      const lines = String(waited.body.stdout).trimEnd().split('\n');
      expect(lines).toHaveLength(100_000);
      expect(lines.at(-1)).toBe('100000');
    } finally {
      await server.close();
    }
  });

  it('thaws the filesystems at /init before writing the identity files, and by itself after thaw_after_ms', async () => {
    const server = await startServer({}, { machine: { snapshot: { job: holderJobs(HOLDER_BINARY), mounts: loopMountOnly } } });
    try {
      expect((await server.json('POST', '/snapshot/prepare', { freeze: 'none', fsfreeze: true })).body.fs_frozen).toEqual([mnt]);
      expect((await server.call('POST', '/init', {})).status).toBe(204);
      expect((await writerFinishes(5_000)).finished).toBe(true);

      expect((await server.json('POST', '/snapshot/prepare', { freeze: 'none', fsfreeze: true, thaw_after_ms: 200 })).body.fs_frozen).toEqual([mnt]);
      expect((await writerFinishes(10_000)).finished).toBe(true);
      expect((await server.json('POST', '/snapshot/thaw')).body).toEqual({ thawed: 0, fs_thawed: [], by: 'request' });
    } finally {
      await server.close();
    }
  });
});
