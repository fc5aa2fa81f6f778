// Issue 36 (D, A.3, C.7-8) and issue 37's concurrent uploads, reproduced as
// an attacker would: every archive is extracted into a target inside a
// scratch root full of canaries (test/helpers/archives.ts) that stand for
// "outside", through PUT /files/archive and through `envd cp` (dist/envd,
// as root and as a plain user), which share the extraction.
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HELD_RECORD_BYTES, MAX_HELD_NAME_BYTES, MAX_NAME_BYTES } from '../../src/files/archive-names.js';
import { plantCanaries, runEnvd, snapshot, tarOf, type Entry } from '../helpers/archives.js';
import { useScratchServer } from '../helpers/scratch-server.js';
import { createTestUser, isRoot, type TestUser } from '../helpers/users.js';

const scratch = useScratchServer('envd-archive-hostile-');
const q = (params: Record<string, string>) => new URLSearchParams(params).toString();
const leftovers = (dir: string) => readdirSync(dir).filter((name) => name.startsWith('.envd-archive-'));

async function upload(path: string, body: Uint8Array, params: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await scratch.server.call('PUT', `/files/archive?${q({ path, ...params })}`, undefined, { body: body as unknown as BodyInit, headers: { 'content-type': 'application/x-tar' } });
  return { status: res.status, body: await res.json() };
}

/** The scratch root with canaries, a snapshot of all but the target, and the target's path. */
function arena(target = 'target'): { dir: string; outside: () => Record<string, string>; before: Record<string, string> } {
  plantCanaries(scratch.dir);
  const outside = () => snapshot(scratch.dir, (name) => name === target.split('/')[0]);
  return { dir: join(scratch.dir, target), outside, before: outside() };
}

describe('symlinks are data: stored verbatim, made last, never written through', () => {
  it('stores a chain l -> . and y -> l/l/../../outside as it is (200), and refuses y/pwned/a/b/file beneath it without creating anything outside', async () => {
    const { dir, outside, before } = arena();
    const chain: Entry[] = [
      { name: 'l', type: 'symlink', linkname: '.' },
      { name: 'y', type: 'symlink', linkname: 'l/l/../../outside' },
    ];
    expect((await upload(dir, await tarOf(chain))).status).toBe(200);
    expect(readlinkSync(join(dir, 'l'))).toBe('.');
    expect(readlinkSync(join(dir, 'y'))).toBe('l/l/../../outside');
    expect(outside()).toEqual(before);

    const other = join(scratch.dir, 'target2');
    const { status, body } = await upload(other, await tarOf([...chain, { name: 'y/pwned/a/b/file', body: 'pwned' }]));
    expect(status).toBe(400);
    expect(body.message).toMatch(/"y\/pwned\/a\/b\/file": a directory on its path is a symlink; nothing was written/);
    expect(existsSync(join(scratch.dir, 'outside/pwned'))).toBe(false);
    expect(existsSync(other)).toBe(false);
    expect(outside()).toEqual(before);
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it.each([
    ['a hard link through a symlink', [{ name: 'l', type: 'symlink', linkname: '../outside' }, { name: 'h', type: 'link', linkname: 'l/canary.txt' }]],
    ['a directory beneath an absolute symlink', [{ name: 'abs', type: 'symlink', linkname: '/' }, { name: 'abs/tmp/evil', type: 'directory' }]],
    ['a symlink beneath a symlink', [{ name: 'l', type: 'symlink', linkname: '../outside' }, { name: 'l/canary.txt', type: 'symlink', linkname: '/etc/passwd' }]],
    ['a symlink over a directory the archive made, then a file beneath it', [{ name: 'd', type: 'directory' }, { name: 'd', type: 'symlink', linkname: '../outside' }, { name: 'd/canary.txt', body: 'x' }]],
  ] as Array<[string, Entry[]]>)('refuses %s with a 400 and changes nothing outside', async (_, entries) => {
    const { dir, outside, before } = arena();
    const { status } = await upload(dir, await tarOf(entries));
    expect(status).toBe(400);
    expect(existsSync(dir)).toBe(false);
    expect(outside()).toEqual(before);
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it('round-trips a Python venv (absolute and relative links) through GET and PUT /files/archive', async () => {
    const venv = join(scratch.dir, 'venv');
    mkdirSync(join(venv, 'bin'), { recursive: true });
    mkdirSync(join(venv, 'lib/python3.12/site-packages'), { recursive: true });
    writeFileSync(join(venv, 'lib/python3.12/site-packages/mod.py'), 'x = 1\n');
    writeFileSync(join(venv, 'pyvenv.cfg'), 'home = /usr/bin\n');
    symlinkSync('/usr/bin/python3', join(venv, 'bin/python'));
    symlinkSync('python', join(venv, 'bin/python3'));
    symlinkSync('lib', join(venv, 'lib64'));
    const archive = Buffer.from(await (await scratch.server.call('GET', `/files/archive?${q({ path: venv })}`)).arrayBuffer());
    const copy = join(scratch.dir, 'copy');
    expect((await upload(copy, archive)).status).toBe(200);
    expect(snapshot(copy, undefined, false)).toEqual(snapshot(venv, undefined, false));
    expect(readlinkSync(join(copy, 'bin/python'))).toBe('/usr/bin/python3');
  });

  it(`takes a link target of ${MAX_NAME_BYTES} bytes and refuses one of ${MAX_NAME_BYTES + 1}`, async () => {
    const at = join(scratch.dir, 'at');
    expect((await upload(at, await tarOf([{ name: 's', type: 'symlink', linkname: 'a'.repeat(MAX_NAME_BYTES) }]))).status).toBe(200);
    expect(readlinkSync(join(at, 's'))).toHaveLength(MAX_NAME_BYTES);
    const over = await upload(join(scratch.dir, 'over'), await tarOf([{ name: 's', type: 'symlink', linkname: 'a'.repeat(MAX_NAME_BYTES + 1) }]));
    expect(over).toMatchObject({ status: 400, body: { message: expect.stringContaining(`a link target of ${MAX_NAME_BYTES + 1} bytes (at most ${MAX_NAME_BYTES})`) } });
  });
});

describe('mode=merge is all or nothing and never replaces a non-empty directory', () => {
  function existing(dir: string): void {
    mkdirSync(join(dir, '.git/objects'), { recursive: true });
    writeFileSync(join(dir, '.git/HEAD'), 'ref: refs/heads/main\n');
    writeFileSync(join(dir, 'a.txt'), 'old');
    writeFileSync(join(dir, 'x'), 'a file');
    mkdirSync(join(dir, 'empty'));
    symlinkSync('../outside', join(dir, 'link'));
  }

  it.each([
    ['a directory entry where the target has a file', [{ name: 'a.txt', body: 'new' }, { name: 'x', type: 'directory' }, { name: 'x/y', body: 'y' }], /"x": a directory where .*\/x is a file/],
    ['a file entry where the target has a non-empty directory (a .git)', [{ name: 'a.txt', body: 'new' }, { name: '.git', body: 'gitdir: elsewhere' }], /"\.git": a file where .*\/\.git is a non-empty directory/],
    ['a directory entry where the target has a symlink (not followed)', [{ name: 'a.txt', body: 'new' }, { name: 'link/pwned', body: 'x' }], /"link": a directory where .*\/link is a symlink/],
  ] as Array<[string, Entry[], RegExp]>)('answers 409 for %s, and changes nothing, inside or out', async (_, entries, message) => {
    const { dir, outside, before } = arena();
    mkdirSync(dir);
    existing(dir);
    const inside = snapshot(dir);
    const { status, body } = await upload(dir, await tarOf(entries), { mode: 'merge' });
    expect(status).toBe(409);
    expect(body.message).toMatch(message);
    expect(snapshot(dir)).toEqual(inside);
    expect(outside()).toEqual(before);
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it('replaces files, symlinks and empty directories, merges into directories and keeps their modes', async () => {
    const { dir, outside, before } = arena();
    mkdirSync(dir);
    existing(dir);
    chmodSync(join(dir, '.git'), 0o700);
    const entries: Entry[] = [
      { name: 'a.txt', body: 'new' },
      { name: 'link', body: 'a file now' },
      { name: 'empty', body: 'a file now' },
      { name: '.git', type: 'directory', mode: 0o755 },
      { name: '.git/config', body: '[core]' },
      { name: 'fresh/deep/f', body: 'f' },
    ];
    expect((await upload(dir, await tarOf(entries), { mode: 'merge' })).status).toBe(200);
    expect(readFileSync(join(dir, 'a.txt'), 'utf8')).toBe('new');
    expect(readFileSync(join(dir, 'link'), 'utf8')).toBe('a file now');
    expect(readFileSync(join(dir, 'empty'), 'utf8')).toBe('a file now');
    expect(readFileSync(join(dir, '.git/HEAD'), 'utf8')).toBe('ref: refs/heads/main\n');
    expect(readFileSync(join(dir, '.git/config'), 'utf8')).toBe('[core]');
    expect(statSync(join(dir, '.git')).mode & 0o777).toBe(0o700);
    expect(readFileSync(join(dir, 'fresh/deep/f'), 'utf8')).toBe('f');
    expect(outside()).toEqual(before);
    expect(leftovers(scratch.dir)).toEqual([]);
  });
});

describe('modes', () => {
  it('applies directory modes last: a 0555 directory and a 0500 one inside it keep their contents', async () => {
    const dir = join(scratch.dir, 'target');
    const entries: Entry[] = [
      { name: 'ro', type: 'directory', mode: 0o555 },
      { name: 'ro/f.txt', body: 'in a read-only dir' },
      { name: 'ro/sub', type: 'directory', mode: 0o500 },
      { name: 'ro/sub/g.txt', body: 'deeper' },
      { name: 'ro/sub/link', type: 'symlink', linkname: '../f.txt' },
    ];
    expect((await upload(dir, await tarOf(entries))).status).toBe(200);
    expect(statSync(join(dir, 'ro')).mode & 0o7777).toBe(0o555);
    expect(statSync(join(dir, 'ro/sub')).mode & 0o7777).toBe(0o500);
    expect(readFileSync(join(dir, 'ro/sub/link'), 'utf8')).toBe('in a read-only dir');
    chmodSync(join(dir, 'ro/sub'), 0o700); // for the scratch directory's removal as a plain user's CI
  });

  it('keeps setuid and setgid bits where root extracts for root', async () => {
    const dir = join(scratch.dir, 'target');
    const entries: Entry[] = [
      { name: 'su', body: '#!/bin/sh\n', mode: 0o4755 },
      { name: 'sg', type: 'directory', mode: 0o2775 },
    ];
    expect((await upload(dir, await tarOf(entries), { username: 'root' })).status).toBe(isRoot() ? 200 : 400);
    if (!isRoot()) return;
    expect(statSync(join(dir, 'su')).mode & 0o7777).toBe(0o4755);
    expect(statSync(join(dir, 'sg')).mode & 0o7777).toBe(0o2775);
  });
});

describe('one extraction per path (issue 37)', () => {
  it('answers 409 to a second PUT on a path while the first is still extracting, and the first ends 200', async () => {
    const dir = join(scratch.dir, 'target');
    const slow = await tarOf([{ name: 'big.bin', body: randomBytes(4 * 1024 * 1024) }, { name: 'last.txt', body: 'last' }]);
    const first = slowPut(dir, slow);
    await new Promise((resolve) => setTimeout(resolve, 150));
    for (const mode of ['create', 'replace', 'merge']) {
      const second = await upload(dir, await tarOf([{ name: 'other.txt', body: 'x' }]), { mode });
      expect(second.status, mode).toBe(409);
      expect(second.body.message).toMatch(/another archive is being extracted into/);
    }
    expect(await first).toBe(200);
    expect(readdirSync(dir).sort()).toEqual(['big.bin', 'last.txt']);
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it('answers one 200 and 409s to PUTs racing on one path, whatever the mode', async () => {
    for (const mode of ['create', 'replace']) {
      const dir = join(scratch.dir, `race-${mode}`);
      if (mode === 'replace') mkdirSync(dir);
      const archives = await Promise.all([0, 1, 2, 3].map((i) => tarOf([{ name: `f${i}`, body: randomBytes(200_000) }])));
      const statuses = (await Promise.all(archives.map((archive) => upload(dir, archive, { mode })))).map((answer) => answer.status);
      expect(statuses.filter((status) => status === 200).length, `${mode}: ${statuses}`).toBeGreaterThanOrEqual(1);
      expect(statuses.every((status) => status === 200 || status === 409), `${mode}: ${statuses}`).toBe(true);
      expect(readdirSync(dir)).toHaveLength(1);
    }
    expect(leftovers(scratch.dir)).toEqual([]);
  });
});

/** PUT with the body sent in 64 KiB pieces 20 ms apart; resolves to the status. */
function slowPut(path: string, body: Buffer, params: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const url = new URL(`/files/archive?${q({ path, ...params })}`, scratch.server.url);
    const headers = { authorization: `Bearer ${scratch.server.token}`, 'content-type': 'application/x-tar', 'transfer-encoding': 'chunked' };
    const req = httpRequest(url, { method: 'PUT', headers }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    void (async () => {
      for (let at = 0; at < body.length; at += 64 * 1024) {
        req.write(body.subarray(at, at + 64 * 1024));
        await new Promise((r) => setTimeout(r, 20));
      }
      req.end();
    })();
  });
}

describe(`names held until the end: at most MAX_HELD_NAME_BYTES (${MAX_HELD_NAME_BYTES})`, () => {
  // Symlinks with long targets reach the budget in few entries: each holds its name, its target and HELD_RECORD_BYTES.
  const NAME = 7; // s000000
  const TARGET = 4096 - NAME - HELD_RECORD_BYTES;
  const fitting = MAX_HELD_NAME_BYTES / (NAME + TARGET + HELD_RECORD_BYTES);
  const links = (count: number) => {
    const target = 't'.repeat(TARGET);
    return tarOf(Array.from({ length: count }, (_, i) => ({ name: `s${String(i).padStart(6, '0')}`, type: 'symlink' as const, linkname: target })));
  };

  it(`extracts ${fitting} symlinks of ${TARGET}-byte targets (exactly the budget) and refuses one more with a 413`, async () => {
    // On tmpfs where there is one: a disk takes ~2 ms per symlink of this length, which measures the disk.
    const base = existsSync('/dev/shm') ? mkdtempSync('/dev/shm/envd-archive-held-') : scratch.dir;
    try {
      await heldAtTheEdge(base);
    } finally {
      if (base !== scratch.dir) rmSync(base, { recursive: true, force: true });
    }
  }, 60_000);

  async function heldAtTheEdge(base: string): Promise<void> {
    const at = join(base, 'at');
    const ok = await upload(at, gzipSync(await links(fitting)));
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(readdirSync(at)).toHaveLength(fitting);
    const over = join(base, 'over');
    const refused = await upload(over, gzipSync(await links(fitting + 1)));
    expect(refused.status).toBe(413);
    expect(refused.body.message).toMatch(new RegExp(`"s${String(fitting).padStart(6, '0')}": the archive's directories and symlinks hold more than ${MAX_HELD_NAME_BYTES} bytes of names`));
    expect(existsSync(over)).toBe(false);
    expect(leftovers(base)).toEqual([]);
  }
});

if (!isRoot()) console.warn('SKIPPED (not root): ownership for a plain user and envd cp as a plain user need root (useradd, chown)');
describe.runIf(isRoot())('as root for a plain user, and envd cp (root: creates a test user)', () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser();
  });
  afterAll(() => user?.remove());

  it("gives every directory it creates to the user (implied ones and the target's missing parents), and leaves no parent after a 400", async () => {
    const dir = join(scratch.dir, 'new/parents/target');
    const entries: Entry[] = [{ name: 'a/b/c.txt', body: 'c' }, { name: 'd', type: 'directory' }, { name: 'l', type: 'symlink', linkname: '/etc' }];
    expect((await upload(dir, await tarOf(entries), { username: user.name })).status).toBe(200);
    for (const path of ['new', 'new/parents', 'new/parents/target', 'new/parents/target/a', 'new/parents/target/a/b', 'new/parents/target/a/b/c.txt', 'new/parents/target/d', 'new/parents/target/l']) {
      const info = lstatSync(join(scratch.dir, path));
      expect([path, info.uid, info.gid]).toEqual([path, user.uid, user.gid]);
    }
    const refused = await upload(join(scratch.dir, 'other/deep/target'), await tarOf([{ name: 'ok.txt', body: 'x' }, { name: '../escape', body: 'x' }]), { username: user.name });
    expect(refused.status).toBe(400);
    expect(existsSync(join(scratch.dir, 'other'))).toBe(false);
  });

  it('writes nothing through a symlink a user puts in place of the temporary directory, chowns nothing, and answers 409', async () => {
    // The user's own directory, holding the target: they may rename what envd makes in it.
    const home = join(scratch.dir, 'home');
    mkdirSync(home);
    chownSync(home, user.uid, user.gid);
    const rootOwned = join(scratch.dir, 'root-owned');
    mkdirSync(rootOwned, { mode: 0o700 });
    const before = snapshot(scratch.dir, (name) => name === 'home');
    const dir = join(home, 'target');
    const answer = slowPut(dir, await tarOf([{ name: 'big.bin', body: randomBytes(2 * 1024 * 1024) }, { name: 'after-swap.txt', body: 'x' }]), { username: user.name });
    let temp: string | undefined;
    for (let tries = 0; tries < 200 && !temp; tries++) {
      temp = readdirSync(home).find((name) => name.startsWith('.envd-archive-'));
      if (!temp) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(temp).toBeDefined();
    expect(lstatSync(join(home, temp!)).uid).toBe(0); // root's, 0700, while it fills
    renameSync(join(home, temp!), join(home, 'moved'));
    symlinkSync(rootOwned, join(home, temp!));
    expect(await answer).toBe(409);
    expect(snapshot(scratch.dir, (name) => name === 'home')).toEqual(before);
    expect(readdirSync(rootOwned)).toEqual([]);
    expect(existsSync(dir)).toBe(false);
    expect(readdirSync(join(home, 'moved'))).toEqual([]); // emptied through its descriptor
  });

  it('drops setuid and setgid bits when extracting for a plain user', async () => {
    const dir = join(scratch.dir, 'target');
    expect((await upload(dir, await tarOf([{ name: 'su', body: '#!/bin/sh\n', mode: 0o4755 }, { name: 'sg', type: 'directory', mode: 0o2775 }]), { username: user.name })).status).toBe(200);
    expect(statSync(join(dir, 'su')).mode & 0o6000).toBe(0);
    expect(statSync(join(dir, 'sg')).mode & 0o7777).toBe(0o775);
  });

  /** A sandbox tree with a setuid file, a 0555 directory with contents and an absolute link. */
  function sandboxTree(): string {
    const remote = join(scratch.dir, 'remote/proj');
    mkdirSync(join(remote, 'ro/sub'), { recursive: true });
    writeFileSync(join(remote, 'ro/sub/f.txt'), 'f');
    writeFileSync(join(remote, 'su'), '#!/bin/sh\n');
    chmodSync(join(remote, 'su'), 0o4755);
    symlinkSync('/usr/bin/python3', join(remote, 'python'));
    chmodSync(join(remote, 'ro'), 0o555);
    return remote;
  }

  it.each(['root', 'a plain user'])('envd cp run as %s: drops setuid bits, keeps a 0555 directory with its contents and an absolute link verbatim', async (who) => {
    const remote = sandboxTree();
    const local = join(scratch.dir, 'local');
    mkdirSync(local);
    const as = who === 'root' ? undefined : user;
    if (as) {
      chmodSync(scratch.dir, 0o755);
      chownSync(local, as.uid, as.gid);
    }
    const result = await runEnvd(['cp', `:${remote}`, join(local, 'proj')], scratch.server, as);
    expect(result.code, result.stderr).toBe(0);
    expect(statSync(join(local, 'proj/su')).mode & 0o7777).toBe(0o755);
    expect(statSync(join(local, 'proj/ro')).mode & 0o7777).toBe(0o555);
    expect(readFileSync(join(local, 'proj/ro/sub/f.txt'), 'utf8')).toBe('f');
    expect(readlinkSync(join(local, 'proj/python'))).toBe('/usr/bin/python3');
    if (as) expect(lstatSync(join(local, 'proj/ro/sub/f.txt')).uid).toBe(as.uid);
    chmodSync(join(local, 'proj/ro'), 0o755);
    chmodSync(join(remote, 'ro'), 0o755);
  });

  it('envd cp into an existing directory refuses to replace a non-empty .git with a file from the sandbox, and changes nothing', async () => {
    const remote = join(scratch.dir, 'remote/proj');
    mkdirSync(remote, { recursive: true });
    writeFileSync(join(remote, '.git'), 'gitdir: /nowhere\n');
    writeFileSync(join(remote, 'README'), 'from the sandbox');
    const local = join(scratch.dir, 'local/proj');
    mkdirSync(join(local, '.git'), { recursive: true });
    writeFileSync(join(local, '.git/HEAD'), 'ref: refs/heads/main\n');
    writeFileSync(join(local, 'README'), 'mine');
    const before = snapshot(local);
    const result = await runEnvd(['cp', `:${remote}`, join(scratch.dir, 'local')], scratch.server);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/"\.git": a file where .* is a non-empty directory/);
    expect(snapshot(local)).toEqual(before);
    expect(leftovers(join(scratch.dir, 'local'))).toEqual([]);
  });
});
