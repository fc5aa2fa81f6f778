import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PROBES, MOUNT_ANSWER_DEADLINE_MS, MOUNT_TABLE_TTL_MS, parseMountInfo } from '../../src/files/mount-guard.js';
import { canMountFuse, mountHungFuse } from '../helpers/hung-fuse.js';
import { startServer, type TestServer } from '../helpers/server.js';

/** How long a request that is not on the hung mount may take on a loaded 2-core machine and still count as answering. */
const ANSWERS_WITHIN_MS = 2_000;

/** envd-holder --probe processes for `point` (read from /proc: one per mount is the promise). */
function probesWaitingOn(point: string): number {
  let count = 0;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (argv[1] === '--probe' && argv[2] === point) count++;
    } catch {
      // gone meanwhile
    }
  }
  return count;
}

/**
 * Issue 43, item 4: a file call into a hung network mount blocks in the kernel,
 * and on envd's four pool threads four such requests stalled every file route.
 * A real hang: a FUSE mount whose "daemon" (this test, holding /dev/fuse) never
 * reads a request, so every call into it waits (killably) until the
 * connection is closed.
 */
/** envd reads the mount table at most every MOUNT_TABLE_TTL_MS: a mount younger than that is not guarded yet. */
const untilEnvdSeesNewMounts = () => new Promise((resolve) => setTimeout(resolve, MOUNT_TABLE_TTL_MS + 100));

describe('the mount table', () => {
  it('reads mount points with escaped names and the type after the optional fields', () => {
    const text = [
      '22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw',
      '90 22 0:50 / /mnt/my\\040share rw,relatime shared:7 master:1 - nfs4 server:/export rw,vers=4.2',
      '91 22 0:51 / /home/u/fuse rw - fuse.sshfs u@h: rw',
      '',
    ].join('\n');
    expect(parseMountInfo(text)).toEqual([
      { point: '/proc', type: 'proc' },
      { point: '/mnt/my share', type: 'nfs4' },
      { point: '/home/u/fuse', type: 'fuse.sshfs' },
    ]);
  });
});

describe.skipIf(!canMountFuse)('a hung FUSE mount', () => {
  let server: TestServer;
  let dir: string;
  let mount: string;
  let healthy: string;
  /** Every hang this describe made: afterAll ends them all before it removes `dir` (an lstat of a hung mount point would wait for ever). */
  const releases: Array<() => void> = [];
  const release = () => releases[0]?.();

  beforeAll(async () => {
    server = await startServer();
    dir = mkdtempSync(join(tmpdir(), 'envd-hung-'));
    mount = join(dir, 'hung');
    healthy = join(dir, 'healthy');
    mkdirSync(mount);
    mkdirSync(healthy);
    releases.push(mountHungFuse(mount));
    await untilEnvdSeesNewMounts();
  });

  afterAll(async () => {
    for (const end of releases) end();
    await server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('answers 9 requests on it (a command\'s cwd included) 503 at the deadline while other file routes and commands answer, and serves it again once it answers', async () => {
    const at = (name: string) => encodeURIComponent(join(mount, name));
    const started = performance.now();
    const hung = [
      server.call('GET', `/files/info?path=${at('a')}`),
      server.call('GET', `/files?path=${at('a.txt')}`),
      server.call('GET', `/files/raw?path=${at('a.bin')}`),
      server.call('GET', `/files/list?path=${encodeURIComponent(mount)}`),
      server.call('POST', '/files/mkdir', { path: join(mount, 'd/e') }),
      server.call('PUT', `/files/raw?path=${at('up.bin')}`, undefined, { body: Buffer.from('bytes'), headers: { 'content-type': 'application/octet-stream' } }),
      server.call('GET', `/files/archive?path=${encodeURIComponent(mount)}`),
      server.call('POST', '/files/rename', { from: join(healthy, 'x'), to: join(mount, 'x') }),
      server.call('POST', '/commands', { cmd: 'true', cwd: join(mount, 'work') }),
    ].map(async (answer) => ({ response: await answer, after: performance.now() - started }));

    // While those wait: the pool, the event loop and the holder are free for everyone else.
    for (let round = 0; round < 3; round++) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      const file = join(healthy, `f${round}.txt`);
      const timed = async (answer: Promise<{ status: number; body: any }>) => {
        const before = performance.now();
        const { status, body } = await answer;
        return { status, body, took: performance.now() - before };
      };
      const written = await timed(server.json('POST', '/files', { path: file, data: `round ${round}` }));
      const read = await timed(server.json('GET', `/files/info?path=${encodeURIComponent(file)}`));
      const listed = await timed(server.json('GET', `/files/list?path=${encodeURIComponent(healthy)}`));
      const command = await timed(server.json('POST', '/commands', { cmd: 'echo', args: ['still here'] }));
      for (const answer of [written, read, listed, command]) {
        expect(answer.status).toBe(200);
        expect(answer.took).toBeLessThan(ANSWERS_WITHIN_MS);
      }
      expect(command.body.stdout).toBe('still here\n');
    }

    for (const { response, after } of await Promise.all(hung)) {
      expect(response.status).toBe(503);
      expect((await response.json()).message).toMatch(new RegExp(`the fuse file system at ${mount} has not answered for \\d+ s; retry when it does$`));
      expect(after).toBeGreaterThanOrEqual(MOUNT_ANSWER_DEADLINE_MS - 100);
      expect(after).toBeLessThan(MOUNT_ANSWER_DEADLINE_MS + ANSWERS_WITHIN_MS);
    }
    // All of them asked one probe, still waiting on the mount.
    expect(probesWaitingOn(mount)).toBe(1);

    // Known to hang: the next request is answered at once, without waiting again.
    const before = performance.now();
    const again = await server.json('GET', `/files/info?path=${at('b')}`);
    expect(again.status).toBe(503);
    expect(performance.now() - before).toBeLessThan(ANSWERS_WITHIN_MS);

    // The daemon goes away: the probe gets its answer (ENOTCONN), and the directory is served again;
    // the mount is gone from the table, and its probe with it.
    release();
    const deadline = performance.now() + 10_000;
    let served = await server.json('GET', `/files/list?path=${encodeURIComponent(mount)}`);
    while (served.status === 503 && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      served = await server.json('GET', `/files/list?path=${encodeURIComponent(mount)}`);
    }
    expect(served).toEqual({ status: 200, body: { entries: [] } });
    // (the table is read again on a request at most every MOUNT_TABLE_TTL_MS)
    while (probesWaitingOn(mount) > 0 && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      await server.json('GET', `/files/exists?path=${encodeURIComponent(mount)}`);
    }
    expect(probesWaitingOn(mount)).toBe(0);
  }, 30_000);

  it(`answers at once, without a new probe, once MAX_PROBES (${MAX_PROBES}) mounts have not answered`, async () => {
    const points = Array.from({ length: MAX_PROBES + 1 }, (_, index) => join(dir, `many-${index}`));
    // The first MAX_PROBES hang one probe each; the last is asked for after they are all late.
    for (const point of points) {
      mkdirSync(point);
      releases.push(mountHungFuse(point));
    }
    await untilEnvdSeesNewMounts();
    const late = await Promise.all(points.slice(0, -1).map((point) => server.json('GET', `/files/info?path=${encodeURIComponent(point)}`)));
    for (const answer of late) expect(answer.status).toBe(503);
    const last = points.at(-1)!;
    const before = performance.now();
    const refused = await server.json('GET', `/files/info?path=${encodeURIComponent(last)}`);
    expect(performance.now() - before).toBeLessThan(ANSWERS_WITHIN_MS);
    expect(refused).toEqual({
      status: 503,
      body: { message: `${last}: ${MAX_PROBES} mounts have not answered (the most envd waits on at once); the fuse file system at ${last} is not tried until one does` },
    });
    expect(probesWaitingOn(last)).toBe(0);
    expect(points.slice(0, -1).map(probesWaitingOn)).toEqual(points.slice(0, -1).map(() => 1));
  }, 30_000);
});
