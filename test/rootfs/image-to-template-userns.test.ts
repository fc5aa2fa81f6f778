// Issue 36: the image converter runs as root of a user namespace whose ids are an
// unprivileged host range (rootfs/userns.mjs). The template it builds is the one
// the in-root mode builds (owners, modes, setuid and setgid as the image says),
// and inside the namespace root has no power over the build host's files.
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error: rootfs/ is plain ESM JavaScript run by node on the build host, with no type declarations.
import { planNamespace, ROOT_RANGE_BASE, runInNamespace } from '../../rootfs/userns.mjs';
import { isRoot } from '../helpers/users.js';

const SCRIPT = join(process.cwd(), 'rootfs/image-to-template.mjs');
const NOBODY = 65534;
let work: string;
beforeAll(() => {
  // 0755 (mkdtemp makes 0700): the plain-user case below walks into it.
  work = mkdtempSync(join(tmpdir(), 'envd-template-userns-'));
  chmodSync(work, 0o755);
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

function convert(args: string[], as?: number, env: NodeJS.ProcessEnv = process.env) {
  const result = spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', env, ...(as === undefined ? {} : { uid: as, gid: as }) });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** Each path's mode, uid and gid in an ext4 image, read with debugfs. */
function owners(image: string, paths: string[]): Record<string, string> {
  return Object.fromEntries(
    paths.map((path) => {
      const stat = execFileSync('debugfs', ['-R', `stat ${path}`, image], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      const mode = /Mode:\s+(\d+)/.exec(stat)?.[1];
      const [, uid, gid] = /User:\s+(\d+)\s+Group:\s+(\d+)/.exec(stat) ?? [];
      return [path, `${mode} ${uid}:${gid}`];
    }),
  );
}

/** A root tree whose owners and modes only root can make: [path, uid, gid, mode, directory?]. */
const TREE: [string, number, number, number, boolean][] = [
  ['etc', 0, 0, 0o755, true],
  ['usr/bin/su', 0, 0, 0o4755, false],
  ['usr/bin/wall', 0, 5, 0o2755, false],
  ['home/user', 1000, 1000, 0o700, true],
  ['home/user/notes', 1000, 1000, 0o600, false],
  ['srv/shared', 1000, 50, 0o2775, true],
  ['opt/edge', 65535, 65535, 0o640, false],
];
const PATHS = TREE.map(([path]) => `/${path}`);

function makeTree(name: string, extra: [string, number, number, number, boolean][] = []): string {
  const root = join(work, name);
  mkdirSync(join(root, 'etc'), { recursive: true });
  writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n');
  for (const [path, uid, gid, mode, directory] of [...TREE, ...extra]) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    if (directory) mkdirSync(join(root, path), { recursive: true });
    else writeFileSync(join(root, path), `${path}\n`);
    chownSync(join(root, path), uid, gid);
    chmodSync(join(root, path), mode); // after chown, which clears setuid and setgid
  }
  return root;
}

/** A docker-save tarball whose one layer is `root`, owners kept. */
function dockerSave(name: string, root: string): string {
  const dir = join(work, `${name}-save`);
  mkdirSync(dir);
  execFileSync('tar', ['-cf', join(dir, 'layer.tar'), '--numeric-owner', '-C', root, '.']);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ config: { Cmd: ['/bin/sh'] } }));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify([{ Config: 'config.json', Layers: ['layer.tar'] }]));
  const file = join(work, `${name}.tar`);
  execFileSync('tar', ['-cf', file, '-C', dir, '.']);
  return file;
}

describe.skipIf(!isRoot())('image-to-template in a user namespace (root only: it chowns the fixture and writes the maps)', () => {
  it('builds the same template as the in-root mode: owners, modes, setuid and setgid as the image says', () => {
    const image = dockerSave('same', makeTree('same'));
    const inNamespace = convert([image, join(work, 'userns.ext4'), '--default-user', 'user']);
    expect(inNamespace, inNamespace.stderr).toMatchObject({ status: 0 });
    expect(inNamespace.stdout).toContain(`converting in a user namespace: image root is host uid/gid ${ROOT_RANGE_BASE}`);
    expect(inNamespace.stdout).toContain('(in a user namespace)');
    const inRoot = convert([image, join(work, 'in-root.ext4'), '--default-user', 'user', '--userns', 'off']);
    expect(inRoot, inRoot.stderr).toMatchObject({ status: 0 });
    expect(inRoot.stdout).toContain('(in-root resolution only)');

    const expected = Object.fromEntries(TREE.map(([path, uid, gid, mode]) => [`/${path}`, `0${mode.toString(8)} ${uid}:${gid}`]));
    expect(owners(join(work, 'userns.ext4'), PATHS)).toEqual(expected);
    expect(owners(join(work, 'in-root.ext4'), [...PATHS, '/usr/local/bin/envd'])).toEqual(owners(join(work, 'userns.ext4'), [...PATHS, '/usr/local/bin/envd']));
    // The image is handed to whoever ran the converter, not left to the range.
    expect(lstatSync(join(work, 'userns.ext4'))).toMatchObject({ uid: 0, gid: 0 });
  });

  it('takes an unpacked directory that only root can read, owners kept', () => {
    const root = makeTree('directory');
    chmodSync(root, 0o700);
    const result = convert([root, join(work, 'directory.ext4'), '--default-user', 'user']);
    expect(result, result.stderr).toMatchObject({ status: 0 });
    expect(owners(join(work, 'directory.ext4'), ['/home/user/notes', '/usr/bin/su'])).toEqual({ '/home/user/notes': '0600 1000:1000', '/usr/bin/su': '04755 0:0' });
  });

  it('refuses with exit status 2 an owner beyond the 65,536 ids the namespace maps, leaving nothing', () => {
    const image = dockerSave('beyond', makeTree('beyond', [['opt/far', 70000, 70000, 0o644, false]]));
    const result = convert([image, join(work, 'beyond.ext4')]);
    expect(result.status, result.stderr).toBe(2);
    expect(result.stderr).toMatch(/layer layer\.tar: .*opt\/far: Cannot change ownership to uid 70000/);
    expect(existsSync(join(work, 'beyond.ext4'))).toBe(false);
  });

  it("gives the namespace's root no power over the build host: a root-owned 0755 directory stays unwritable, and what it makes is the range's", async () => {
    const canary = mkdtempSync(join(work, 'canary-'));
    chmodSync(canary, 0o755);
    const scratch = mkdtempSync(join(work, 'scratch-'));
    chownSync(scratch, ROOT_RANGE_BASE, ROOT_RANGE_BASE);
    // Root as the image sees it (uid 0, every capability in the namespace), yet the write is refused:
    // had a layer escaped the in-root checks through `evil -> <canary>`, this is all it could do.
    const script = `[ "$(id -u)" = 0 ] || exit 10; ls ${canary} >/dev/null || exit 11; touch ${canary}/PWNED 2>/dev/null && exit 12; chown 1000:1000 ${canary} 2>/dev/null && exit 13; touch made; exit 0`;
    const outcome = await runInNamespace(planNamespace(), ['sh', '-c', script], { cwd: scratch });
    expect(outcome).toEqual({ status: 0, signal: null });
    expect(existsSync(join(canary, 'PWNED'))).toBe(false);
    expect(lstatSync(canary)).toMatchObject({ uid: 0, gid: 0 });
    expect(lstatSync(join(scratch, 'made'))).toMatchObject({ uid: ROOT_RANGE_BASE, gid: ROOT_RANGE_BASE });
    // The control: the same write as root on the host goes through, so the refusal above is the namespace's.
    execFileSync('touch', [join(canary, 'control')]);
  });

  it('where the kernel refuses the namespace (unshare: Operation not permitted): --userns require refuses, auto warns and converts in-root', () => {
    // Stands for user.max_user_namespaces=0: an unshare that fails as the kernel's refusal makes it fail.
    const bin = mkdtempSync(join(work, 'bin-'));
    writeFileSync(join(bin, 'unshare'), '#!/bin/sh\necho "unshare: unshare failed: Operation not permitted" >&2\nexit 1\n', { mode: 0o755 });
    const env = { ...process.env, PATH: `${bin}:${process.env.PATH}` };
    const image = dockerSave('refused-ns', makeTree('refused-ns'));
    const refused = convert([image, join(work, 'refused-ns.ext4'), '--userns', 'require'], undefined, env);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain('no user namespace (unshare: unshare failed: Operation not permitted); --userns require refuses');
    expect(existsSync(join(work, 'refused-ns.ext4'))).toBe(false);
    const fellBack = convert([image, join(work, 'fallback-ns.ext4'), '--default-user', 'user'], undefined, env);
    expect(fellBack, fellBack.stderr).toMatchObject({ status: 0 });
    expect(fellBack.stderr).toContain('warning: no user namespace (unshare: unshare failed: Operation not permitted): converting as root, relying on in-root resolution alone');
    expect(fellBack.stdout).toContain('(in-root resolution only)');
    expect(owners(join(work, 'fallback-ns.ext4'), ['/usr/bin/su', '/home/user'])).toEqual({ '/usr/bin/su': '04755 0:0', '/home/user': '0700 1000:1000' });
  });

  it('as a plain user without subordinate ids: --userns require refuses, auto warns and falls back to the in-root mode', () => {
    const image = join(work, 'plain.tar');
    execFileSync('tar', ['-cf', image, '-C', makeTree('plain-tree'), 'etc']);
    const out = mkdtempSync(join(work, 'out-'));
    chownSync(out, NOBODY, NOBODY);
    const refused = convert([image, join(out, 'refused.ext4'), '--userns', 'require'], NOBODY);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/no user namespace \(.*(subuid|uidmap|unshare).*\); --userns require refuses/);
    const fellBack = convert([image, join(out, 'fallback.ext4')], NOBODY);
    expect(fellBack, fellBack.stderr).toMatchObject({ status: 0 });
    expect(fellBack.stderr).toMatch(/warning: no user namespace .*: converting as this user, relying on in-root resolution alone/);
    expect(fellBack.stdout).toContain('(in-root resolution only)');
  });
});
