import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { holderJobs } from '../../src/snapshot/holder-jobs.js';
import { HOLDER_BINARY } from '../helpers/holder.js';

// envd-holder's snapshot and fork jobs. As root they would credit entropy to,
// rename, or freeze this shared machine: here they run as nobody, where each
// system call answers EPERM, which shows that the request reached it whole.
// The guest suite makes the calls for real (test/guest/qemu-snapshot.test.ts).

const bin = mkdtempSync(join(tmpdir(), 'envd-jobs-'));
afterAll(() => rmSync(bin, { recursive: true, force: true }));
const asNobody = join(bin, 'holder-as-nobody');
writeFileSync(asNobody, `#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups -- ${HOLDER_BINARY} "$@"\n`);
chmodSync(asNobody, 0o755);
// nobody opens it (the directory FIFREEZE is asked for): searchable, as the test's temp dir's parents must be.
chmodSync(bin, 0o755);
const job = holderJobs(asNobody);

describe('envd-holder system jobs (as nobody)', () => {
  it('reaches RNDADDENTROPY with the bytes from stdin, and says EPERM', async () => {
    await expect(job(['--add-entropy'], Buffer.alloc(32, 1))).rejects.toThrow('envd-holder --add-entropy: RNDADDENTROPY: Operation not permitted (EPERM)');
  });

  it('reaches sethostname, and says EPERM', async () => {
    await expect(job(['--set-hostname', 'fork-1'])).rejects.toThrow('envd-holder --set-hostname: sethostname: Operation not permitted (EPERM)');
  });

  it('reaches FIFREEZE and FITHAW, and says EPERM', async () => {
    await expect(job(['--fsfreeze', bin])).rejects.toThrow('envd-holder --fsfreeze: FIFREEZE: Operation not permitted (EPERM)');
    await expect(job(['--fsthaw', bin])).rejects.toThrow('envd-holder --fsthaw: FITHAW: Operation not permitted (EPERM)');
  });

  it('refuses fewer than 32 or more than 4096 bytes of entropy before any call, exit 2', () => {
    for (const size of [0, 31, 4097]) {
      const run = spawnSync(asNobody, ['--add-entropy'], { input: Buffer.alloc(size), encoding: 'utf8' });
      expect(run.status, String(size)).toBe(2);
      expect(run.stderr).toBe(`envd-holder --add-entropy: ${size > 4096 ? 4097 : size} bytes on stdin, want 32 to 4096\n`);
    }
  });

  it('refuses missing or extra arguments with its usage, exit 2', () => {
    for (const args of [['--fsfreeze'], ['--fsthaw', '/a', '/b'], ['--set-hostname'], ['--set-hostname', ''], ['--sync', 'x']]) {
      const run = spawnSync(asNobody, args, { encoding: 'utf8' });
      expect(run.status, args.join(' ')).toBe(2);
      expect(run.stderr, args.join(' ')).toMatch(/^usage: envd-holder /);
    }
  });

  it('syncs (sync(2) harms nothing) and answers a failed job with its stderr line', async () => {
    await expect(holderJobs(HOLDER_BINARY)(['--sync'])).resolves.toBeUndefined();
    await expect(holderJobs(HOLDER_BINARY)(['--fsthaw', join(bin, 'missing')])).rejects.toThrow('envd-holder --fsthaw: open: No such file or directory (ENOENT)');
  });
});
