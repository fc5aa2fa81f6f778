// rootfs/image-to-template.mjs (issue 25 §4): a docker-save or OCI tarball, or
// an unpacked directory, becomes an ext4 template with envd and its init, its
// layers applied with their whiteouts; bad input exits 2 and leaves nothing.
// The images are read back with debugfs (e2fsprogs), without mounting them.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const SCRIPT = join(process.cwd(), 'rootfs/image-to-template.mjs');
let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'envd-template-'));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

function convert(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8' });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

const debugfs = (image: string, request: string) => execFileSync('debugfs', ['-R', request, image], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
const listDir = (image: string, dir: string) =>
  debugfs(image, `ls -p ${dir}`)
    .split('\n')
    .map((line) => line.split('/')[5])
    .filter((name) => name && name !== '.' && name !== '..');

/** A directory tree as a tar file (optionally gzipped), entries relative to it. */
function tarOf(dir: string, file: string, gzip = false): string {
  execFileSync('tar', [gzip ? '-czf' : '-cf', file, '-C', dir, '.']);
  return file;
}

function tree(name: string, files: Record<string, string>): string {
  const dir = join(work, name);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

const BASE = {
  'etc/passwd': 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n',
  'etc/group': 'root:x:0:\nuser:x:1000:\n',
  'dir/a': 'a',
  'dir/b': 'b',
  'gone.txt': 'removed by the next layer',
  'kept.txt': 'kept',
};
const CONFIG = { config: { Entrypoint: ['/bin/sh', '-c'], Cmd: ['echo started'], User: 'user', WorkingDir: '/home/user', Env: ['PATH=/bin', 'MODE=test'] } };

/** Two layers: the base, then one that removes gone.txt and empties dir/ before adding dir/c. */
function layers(prefix: string, gzip: boolean): [string, string] {
  const lower = tarOf(tree(`${prefix}-lower`, BASE), join(work, `${prefix}-lower.tar`), gzip);
  const upper = tarOf(tree(`${prefix}-upper`, { '.wh.gone.txt': '', 'dir/.wh..wh..opq': '', 'dir/c': 'c' }), join(work, `${prefix}-upper.tar`), gzip);
  return [lower, upper];
}

function dockerSave(): string {
  const dir = join(work, 'save');
  mkdirSync(dir);
  const [lower, upper] = layers('save', false);
  copyFileSync(lower, join(dir, 'lower.tar'));
  copyFileSync(upper, join(dir, 'upper.tar'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(CONFIG));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify([{ Config: 'config.json', RepoTags: ['t:1'], Layers: ['lower.tar', 'upper.tar'] }]));
  return tarOf(dir, join(work, 'image-save.tar'));
}

function ociLayout(): string {
  const dir = join(work, 'oci');
  mkdirSync(join(dir, 'blobs/sha256'), { recursive: true });
  const put = (data: Buffer | string) => {
    const digest = createHash('sha256').update(data).digest('hex');
    writeFileSync(join(dir, 'blobs/sha256', digest), data);
    return `sha256:${digest}`;
  };
  const [lower, upper] = layers('oci', true);
  const manifest = {
    schemaVersion: 2,
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: put(JSON.stringify(CONFIG)) },
    layers: [lower, upper].map((layer) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: put(readFileSync(layer)) })),
  };
  writeFileSync(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ digest: put(JSON.stringify(manifest)), platform: { os: 'linux', architecture: 'amd64' } }] }));
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  return tarOf(dir, join(work, 'image-oci.tar'));
}

const leftovers = () => readdirSync(work).filter((name) => name.includes('.work-') || name.endsWith('.ext4.partial'));

describe('image-to-template', () => {
  it.each([
    ['a docker save tarball', dockerSave],
    ['an OCI layout tarball with gzipped layers', ociLayout],
  ])('turns %s into an ext4 template: whiteouts applied, envd and envd-init injected, the entrypoint kept', (_, make) => {
    const image = join(work, `${make.name}.ext4`);
    const result = convert(make(), image, '--default-user', 'user', '--entrypoint');
    expect(result, result.stderr).toMatchObject({ status: 0 });
    expect(result.stdout).toContain('started by envd-init');
    expect(listDir(image, '/').sort()).toEqual(expect.arrayContaining(['dir', 'etc', 'kept.txt', 'sbin', 'usr']));
    expect(listDir(image, '/')).not.toContain('gone.txt');
    expect(listDir(image, '/dir')).toEqual(['c']);
    expect(listDir(image, '/usr/local/bin')).toEqual(['envd']);
    expect(listDir(image, '/usr/local/lib/envd').sort()).toEqual(['envd-init', 'runtime']);
    expect(debugfs(image, 'stat /sbin/init')).toContain('Fast link dest: "/usr/local/lib/envd/envd-init"');
    expect(debugfs(image, 'cat /etc/envd/envd.env')).toContain('ENVD_DEFAULT_USER=user\n');
    expect(JSON.parse(debugfs(image, 'cat /etc/envd/entrypoint.json'))).toEqual({ args: ['/bin/sh', '-c', 'echo started'], user: 'user', cwd: '/home/user', envs: { PATH: '/bin', MODE: 'test' } });
    expect(leftovers()).toEqual([]);
  });

  it('takes an unpacked directory, and an image with systemd gets the unit instead', () => {
    const dir = tree('with-systemd', { ...BASE, 'lib/systemd/systemd': '#!/bin/sh\n' });
    execFileSync('chmod', ['+x', join(dir, 'lib/systemd/systemd')]);
    const image = join(work, 'systemd.ext4');
    expect(convert(dir, image).status).toBe(0);
    expect(listDir(image, '/etc/systemd/system/multi-user.target.wants')).toEqual(['envd.service']);
    expect(listDir(image, '/')).not.toContain('sbin');
  });

  it.each([
    ['a file that is no tar archive', () => writeFileSync(join(work, 'junk.tar'), 'not a tar at all'.repeat(100)) ?? join(work, 'junk.tar'), [], /is not a tar archive/],
    ['a root without /etc/passwd', () => tree('no-passwd', { 'bin/x': '' }), [], /has no \/etc\/passwd/],
    ['a default user the image does not have', () => tree('no-user', BASE), ['--default-user', 'nobody-here'], /the default user nobody-here is not in/],
    ['an unknown option', () => tree('any', BASE), ['--colour'], /unknown option --colour/],
  ] as const)('refuses %s with exit status 2 and leaves nothing behind', (_, make, extra, message) => {
    const image = join(work, 'refused.ext4');
    const result = convert(make(), image, ...extra);
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(existsSync(image)).toBe(false);
    expect(leftovers()).toEqual([]);
  });
});
