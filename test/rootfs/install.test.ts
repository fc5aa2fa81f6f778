// rootfs/install.sh writes into an image's root, and the image is an
// attacker's (issue 36 item 1): its own absolute symlinks (`usr/local/lib`,
// `etc/envd`, `sbin` pointing at host paths) are resolved inside the root, as
// the VM's kernel will resolve them, never followed to the build host. Without
// --default-user it takes `user` where the image has it, else root, and says
// which (issue 37 item 2).
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { snapshot } from './hostile.js';

const INSTALL = join(process.cwd(), 'rootfs/install.sh');
const ENVD_INIT = '/usr/local/lib/envd/envd-init';
const NOBODY = 65534;
const scratch = mkdtempSync(join(tmpdir(), 'envd-install-'));
chmodSync(scratch, 0o755); // nobody walks into it
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function install(root: string, args: string[] = [], as?: number): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(INSTALL, [root, ...args], { encoding: 'utf8', env: { ...process.env, NODE: process.execPath }, ...(as === undefined ? {} : { uid: as, gid: as }) });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** An image root with /etc/passwd of these users (busybox-like when `user` is absent). */
function imageRoot(name: string, users: string[]): string {
  const root = join(scratch, name);
  mkdirSync(join(root, 'etc'), { recursive: true });
  writeFileSync(join(root, 'etc/passwd'), users.map((user, i) => `${user}:x:${i === 0 ? 0 : 1000 + i}:${i === 0 ? 0 : 1000 + i}::/home/${user}:/bin/sh\n`).join(''));
  return root;
}

const envdEnv = (root: string) => readFileSync(join(root, 'etc/envd/envd.env'), 'utf8');

describe('install.sh into a hostile image', () => {
  it("resolves the image's absolute symlinks inside the root: the host's directories are untouched", () => {
    const host = join(scratch, 'host');
    for (const dir of ['lib/envd/runtime', 'etc-envd', 'sbin', 'bin']) mkdirSync(join(host, dir), { recursive: true });
    writeFileSync(join(host, 'lib/envd/runtime/canary'), 'the host runtime\n');
    writeFileSync(join(host, 'etc-envd/envd.env'), 'HOST=1\n');
    writeFileSync(join(host, 'sbin/init'), '#!/bin/sh\n# the host init\n', { mode: 0o755 });
    writeFileSync(join(host, 'bin/envd'), 'the host envd\n');
    const root = imageRoot('links-to-host', ['root', 'user']);
    mkdirSync(join(root, 'usr/local'), { recursive: true });
    symlinkSync(join(host, 'lib'), join(root, 'usr/local/lib'));
    symlinkSync(join(host, 'bin'), join(root, 'usr/local/bin'));
    symlinkSync(join(host, 'etc-envd'), join(root, 'etc/envd'));
    symlinkSync(join(host, 'sbin'), join(root, 'sbin'));
    const before = snapshot(host);

    const result = install(root);
    expect(result, result.stderr).toMatchObject({ status: 0 });
    expect(snapshot(host)).toEqual(before);
    // Everything landed where the image's own paths lead, inside the root; its links are kept verbatim.
    const inside = join(root, host);
    expect(readdirSync(join(inside, 'lib/envd')).sort()).toEqual(['envd-init', 'runtime']);
    expect(statSync(join(inside, 'bin/envd')).mode & 0o777).toBe(0o755);
    expect(readFileSync(join(inside, 'etc-envd/envd.env'), 'utf8')).toContain('ENVD_DEFAULT_USER=user\n');
    expect(readlinkSync(join(inside, 'sbin/init'))).toBe(ENVD_INIT);
    expect(readlinkSync(join(root, 'sbin'))).toBe(join(host, 'sbin'));
  });

  // As nobody: had install.sh followed sbin -> /sbin, it could not have touched this machine's /sbin.
  it('gives an image with sbin -> /sbin, etc/envd -> /etc/envd and usr/local/lib -> /usr/local/lib its own directories', () => {
    const root = imageRoot('self-links', ['root']);
    mkdirSync(join(root, 'usr/local'), { recursive: true });
    symlinkSync('/sbin', join(root, 'sbin'));
    symlinkSync('/etc/envd', join(root, 'etc/envd'));
    symlinkSync('/usr/local/lib', join(root, 'usr/local/lib'));
    spawnSync('chown', ['-R', '-h', `${NOBODY}:${NOBODY}`, root]);
    chownSync(root, NOBODY, NOBODY);
    const hostInit = lstatSync('/sbin/init', { throwIfNoEntry: false });

    const result = install(root, [], NOBODY);
    expect(result, result.stderr).toMatchObject({ status: 0 });
    expect(result.stdout).toContain('/sbin is a symbolic link loop: replaced by a directory');
    expect(lstatSync(join(root, 'sbin')).isDirectory()).toBe(true);
    expect(readlinkSync(join(root, 'sbin/init'))).toBe(ENVD_INIT);
    expect(readdirSync(join(root, 'usr/local/lib/envd')).sort()).toEqual(['envd-init', 'runtime']);
    expect(envdEnv(root)).toContain('ENVD_DEFAULT_USER=root\n');
    expect(lstatSync('/sbin/init', { throwIfNoEntry: false })).toEqual(hostInit);
  });

  it("keeps the image's own /sbin/init as /sbin/init.image, once, and installs again over itself", () => {
    const root = imageRoot('own-init', ['root']);
    mkdirSync(join(root, 'sbin'));
    writeFileSync(join(root, 'sbin/init'), 'the image init\n');
    expect(install(root).status).toBe(0);
    expect(install(root).status).toBe(0);
    expect(readlinkSync(join(root, 'sbin/init'))).toBe(ENVD_INIT);
    expect(readFileSync(join(root, 'sbin/init.image'), 'utf8')).toBe('the image init\n');
  });
});

describe('the default user of install.sh', () => {
  it.each([
    ['a busybox or Alpine root without user: root', ['root', 'daemon', 'nobody'], 'root', 'default user root (the image has no user account)'],
    ['a root with user: user', ['root', 'user'], 'user', 'default user user (the image has a user account)'],
  ])('without --default-user, takes %s, and says so', (_, users, expected, said) => {
    const root = imageRoot(`default-${expected}`, users);
    const result = install(root, ['--init', 'busybox']);
    expect(result, result.stderr).toMatchObject({ status: 0 });
    expect(result.stdout).toContain(`install.sh: ${said}\n`);
    expect(envdEnv(root)).toContain(`ENVD_DEFAULT_USER=${expected}\n`);
    expect(readFileSync(join(root, 'etc/inittab'), 'utf8')).toBe('::respawn:/usr/local/bin/envd\n');
  });

  it('refuses a --default-user the image does not have, and a root without /etc/passwd, with exit status 2', () => {
    const root = imageRoot('asked-missing', ['root']);
    expect(install(root, ['--default-user', 'user'])).toMatchObject({ status: 2, stderr: expect.stringContaining('the default user user is not in') });
    const empty = join(scratch, 'no-passwd');
    mkdirSync(empty);
    expect(install(empty)).toMatchObject({ status: 2, stderr: expect.stringContaining('has no /etc/passwd') });
    expect(readdirSync(empty)).toEqual([]);
  });
});
