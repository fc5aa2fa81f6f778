import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { encodeHeader, padding } from '../../src/files/tar/format.js';
import { makeCanaries, type Canaries } from '../helpers/canaries.js';
import { sh } from '../helpers/files.js';
import { isRoot } from '../helpers/users.js';
import { startStressEnvd, type StressEnvd } from '../stress/harness.js';

/**
 * Issue 36 (A, B) and 43 (a request that holds a pool thread forever), tried
 * as an attacker would: a plain sandbox user (the envd's default user) owns
 * the directory envd writes into and changes it while envd works, and a
 * scratch root beside it holds root's canaries, which must never change.
 * envd runs as its own process (dist/envd.js) so that a wedged thread pool
 * shows as requests that do not answer, not as a wedged test.
 */

const q = (path: string) => `path=${encodeURIComponent(path)}`;
const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');
/** A request that must answer: aborted (and failed) after `ms`. */
const within = (ms: number) => ({ signal: AbortSignal.timeout(ms) });

/** Every attacker started, stopped in afterAll too (a test that timed out never reaches its finally). */
const attackers = new Set<ChildProcess>();

/** Runs `script` (CommonJS, node -e) as the test user until stopped; `dir` and `canary` are in its environment. */
function asUser(target: StressEnvd, script: string, env: Record<string, string>): ChildProcess {
  const { uid, gid } = statSync(target.dir);
  const child = spawn(process.execPath, ['-e', script], { uid, gid, env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit'] });
  attackers.add(child);
  return child;
}

/** The name of the user who owns `dir`. */
function ownerName(dir: string): string {
  const uid = String(statSync(dir).uid);
  return readFileSync('/etc/passwd', 'utf8').split('\n').find((line) => line.split(':')[2] === uid)!.split(':')[0]!;
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

/** A small tar of one file, for PUT /files/archive. */
function tinyTar(): Buffer {
  const data = Buffer.from('hello\n');
  const header = encodeHeader({ name: 'a.txt', type: 'file', mode: 0o644, uid: 0, gid: 0, size: data.length, mtime: 0, linkname: '' });
  return Buffer.concat([header, data, Buffer.alloc(padding(data.length)), Buffer.alloc(1024)]);
}

if (!isRoot()) console.warn('SKIPPED (not root): hostile-path tests need root (a plain test user, chown)');
describe.runIf(isRoot())('root never follows what a plain user controls, and no request holds a thread forever', () => {
  let target: StressEnvd;
  let canaries: Canaries;
  let before: string;

  beforeAll(async () => {
    target = await startStressEnvd();
    canaries = makeCanaries();
    before = canaries.snapshot();
  }, 60_000);
  afterAll(async () => {
    for (const child of attackers) await stop(child);
    await target?.stop();
    if (canaries) rmSync(canaries.root, { recursive: true, force: true });
  });
  beforeEach(() => expect(canaries.snapshot()).toBe(before));
  const asUserSh = (script: string) => sh('runuser', ['-u', ownerName(target.dir), '--', 'sh', '-c', script]);

  /** /files and /commands still answer promptly (generous bounds for a loaded 2-core machine; a wedged pool never answers). */
  async function expectResponsive(): Promise<void> {
    const regular = join(target.dir, 'regular.txt');
    writeFileSync(regular, 'still here\n');
    const started = Date.now();
    const [info, read, command] = await Promise.all([
      target.call('GET', `/files/info?${q(regular)}`, undefined, within(5_000)),
      target.call('GET', `/files?${q(regular)}`, undefined, within(5_000)),
      target.call('POST', '/commands', { cmd: 'true' }, within(10_000)),
    ]);
    expect([info.status, read.status, command.status]).toEqual([200, 200, 200]);
    expect(Date.now() - started).toBeLessThan(5_000);
  }

  it('a raw upload whose temporary file is swapped for a symlink to root\'s file neither chmods, chowns nor reports that file (36, item 2)', async () => {
    const upload = join(target.dir, 'up.bin');
    // The user renames every temporary file of up.bin away the moment it appears, and puts a symlink to root's secret in its place.
    const swapper = asUser(
      target,
      `const fs = require('fs'); const path = require('path'); let n = 0;
       const tick = () => { for (const name of fs.readdirSync(process.env.DIR)) {
         if (!/^\\.up\\.bin\\.envd-.*\\.tmp$/.test(name)) continue;
         try { fs.renameSync(path.join(process.env.DIR, name), path.join(process.env.DIR, 'moved-' + n++)); fs.symlinkSync(process.env.CANARY, path.join(process.env.DIR, name)); } catch {}
       } setImmediate(tick); }; tick();`,
      { DIR: target.dir, CANARY: canaries.file },
    );
    try {
      const body = Buffer.from('the uploaded bytes\n');
      // The body comes in two parts with a pause between, so that the user has time to swap.
      const answer = await new Promise<{ status: number; json: any }>((resolve, reject) => {
        const req = request(`${target.url}/files/raw?${q(upload)}`, { method: 'PUT', headers: { authorization: `Bearer ${target.token}`, 'content-type': 'application/octet-stream', 'content-length': String(body.length) } }, (res) => {
          let text = '';
          res.on('data', (c) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(text) }));
        });
        req.on('error', reject);
        req.write(body.subarray(0, 5));
        setTimeout(() => req.end(body.subarray(5)), 1_000);
      });
      expect(answer.json.sha256).not.toBe(sha256(readFileSync(canaries.file)));
      expect(answer.status).toBe(409);
      expect(answer.json.message).toMatch(/temporary file was replaced/);
    } finally {
      await stop(swapper);
    }
    expect(canaries.snapshot()).toBe(before);
    // The bytes went into envd's own file (the one the user moved), never through the symlink.
    const moved = readdirSync(target.dir).filter((name) => name.startsWith('moved-'));
    expect(moved.length).toBeGreaterThan(0);
    expect(readFileSync(join(target.dir, moved[0]!), 'utf8')).toBe('the uploaded bytes\n');
  });

  it('moves nothing of root\'s when a rename goes through a symlink the user put in its own directory (36, rule)', async () => {
    // The user links its directory to root's 0700 directory, then asks envd (root, on its behalf) to move a file out of it.
    await asUserSh(`ln -s ${canaries.dir} ${join(target.dir, 'into-root')}`);
    const stolen = join(target.dir, 'stolen');
    const out = await target.call('POST', '/files/rename', { from: join(target.dir, 'into-root', 'keep-0'), to: stolen }, within(5_000));
    expect(out.status).toBe(400);
    expect((await out.json()).message).toMatch(/which is not theirs; envd does not follow it as root/);
    // Nor into root's directory through the link.
    writeFileSync(join(target.dir, 'mine.txt'), 'mine\n');
    const into = await target.call('POST', '/files/rename', { from: join(target.dir, 'mine.txt'), to: join(target.dir, 'into-root', 'planted') }, within(5_000));
    expect(into.status).toBe(400);
    expect(existsSync(stolen)).toBe(false);
    expect(canaries.snapshot()).toBe(before);
    // The user's own link into the user's own directory (a venv's lib64 -> lib) is followed as before.
    await asUserSh(`mkdir -p ${join(target.dir, 'venv', 'lib')} && ln -s lib ${join(target.dir, 'venv', 'lib64')}`);
    const own = await target.call('POST', '/files/rename', { from: join(target.dir, 'mine.txt'), to: join(target.dir, 'venv', 'lib64', 'mine.txt') }, within(5_000));
    expect(own.status).toBe(200);
    expect(readFileSync(join(target.dir, 'venv', 'lib', 'mine.txt'), 'utf8')).toBe('mine\n');
  });

  it('answers four checksums of a FIFO with 400 at once, and files and commands still answer (36, item 5)', async () => {
    const fifo = join(target.dir, 'fifo');
    sh('mkfifo', [fifo]);
    const answers = await Promise.all(
      Array.from({ length: 4 }, () =>
        target.call('GET', `/files/info?checksum=sha256&${q(fifo)}`, undefined, within(3_000)).then(
          async (response) => ({ status: response.status, body: await response.json() }),
          (error: Error) => ({ status: 0, body: error.name }),
        ),
      ),
    );
    for (const answer of answers) expect(answer).toEqual({ status: 400, body: { message: `${fifo}: is a FIFO, not a regular file that can be read` } });
    await expectResponsive();
  });

  it('refuses the checksum and raw read of a character device with 400 instead of reading it forever (36, item 5)', async () => {
    for (const device of ['/dev/zero', '/dev/urandom']) {
      const info = await target.call('GET', `/files/info?checksum=sha256&${q(device)}`, undefined, within(3_000));
      expect(info.status).toBe(400);
      expect((await info.json()).message).toBe(`${device}: is a character device, not a regular file that can be read`);
      const raw = await target.call('GET', `/files/raw?${q(device)}`, undefined, within(3_000));
      expect(raw.status).toBe(400);
    }
    await expectResponsive();
  });

  it('answers eight mkdirs and writes under /proc with a 4xx, and files and commands still answer (43, item 4)', async () => {
    const requests = [
      ...Array.from({ length: 6 }, (_, i) => target.call('POST', '/files/mkdir', { path: `/proc/envd-test-${i}/a/b` }, within(5_000))),
      target.call('POST', '/files', { path: '/proc/envd-test/x/file', data: 'x' }, within(5_000)),
      target.call('PUT', `/files/raw?${q('/proc/envd-test/y/file')}`, undefined, { ...within(5_000), body: 'x', headers: { 'content-type': 'application/octet-stream' } }),
    ];
    const answers = await Promise.all(requests.map((pending) => pending.then(async (response) => `${response.status} ${(await response.json()).message}`, (error: Error) => error.name)));
    console.log(answers);
    for (const answer of answers) expect(answer).toMatch(/^4\d\d /);
    await expectResponsive();
  });

  it('answers an archive extracted into /sys with 403, as every other route does (43, item 4: EPERM)', async () => {
    const response = await target.call('PUT', `/files/archive?${q('/sys/envd-test')}`, undefined, { ...within(10_000), body: new Uint8Array(tinyTar()), headers: { 'content-type': 'application/x-tar' } });
    expect(response.status).toBe(403);
    expect((await response.json()).message).toMatch(/EPERM|EACCES|EROFS/);
    const mkdir = await target.call('POST', '/files/mkdir', { path: '/sys/envd-test' }, within(5_000));
    expect(mkdir.status).toBe(403);
  });

  it('deletes a tree whose subdirectories the user keeps swapping for symlinks to root\'s directory without touching that directory (36, item 4)', async () => {
    const swapper = asUser(
      target,
      `const fs = require('fs'); const path = require('path');
       const tick = () => { for (const tree of fs.readdirSync(process.env.DIR).filter((n) => /^tree-\d+$/.test(n))) for (let i = 0; i < 8; i++) {
         const sub = path.join(process.env.DIR, tree, 'sub' + i);
         try { fs.renameSync(sub, sub + '.away'); fs.symlinkSync(process.env.CANARY, sub); fs.unlinkSync(sub); fs.renameSync(sub + '.away', sub); } catch {}
       } setImmediate(tick); }; tick();`,
      { DIR: target.dir, CANARY: canaries.dir },
    );
    try {
      for (let round = 0; round < 20; round++) {
        const tree = join(target.dir, `tree-${round}`);
        // Made under another name and renamed into place: the swapper only touches tree/sub*.
        asUserSh(`mkdir -p ${tree}.new && cd ${tree}.new && for i in 0 1 2 3 4 5 6 7; do mkdir -p sub$i && for j in 0 1 2 3 4 5 6 7 8 9; do echo x > sub$i/f$j; done; done && mv ${tree}.new ${tree}`);
        const response = await target.call('DELETE', `/files?${q(tree)}`, undefined, within(10_000));
        expect(response.status).toBeLessThan(500);
        expect(canaries.snapshot()).toBe(before);
        // Cleaned up as the user: root's own rm -r would be as steerable as envd's was.
        asUserSh(`rm -rf ${tree} || true`);
      }
    } finally {
      await stop(swapper);
    }
    expect(canaries.snapshot()).toBe(before);
    expect(existsSync(canaries.dir)).toBe(true);
  }, 120_000);
});
