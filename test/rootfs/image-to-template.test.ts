// rootfs/image-to-template.mjs (issue 25 §4): a docker-save or OCI tarball, or
// an unpacked directory, becomes an ext4 template with envd and its init, its
// layers applied with their whiteouts; bad input exits 2 and leaves nothing.
// The images are read back with debugfs (e2fsprogs), without mounting them.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { layerTar, snapshot, type LayerEntry } from './hostile.js';

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
    // The entrypoint as a service (issue 39): started at boot, restarted when it fails.
    expect(JSON.parse(debugfs(image, 'cat /etc/envd/services/entrypoint.json'))).toEqual({ cmd: '/bin/sh', args: ['-c', 'echo started'], user: 'user', cwd: '/home/user', envs: { PATH: '/bin', MODE: 'test' } });
    expect(debugfs(image, 'cat /etc/envd/envd.env')).not.toContain('ENVD_ENTRYPOINT_FILE');
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

// Issue 36 item 1: the image is an attacker's. A scratch "host" of canaries stands for the build host.
describe('image-to-template with a hostile image', () => {
  const SECRET = 'host secret\n';
  function host(): { dir: string; before: Record<string, string> } {
    const dir = join(work, `host-${Math.random().toString(16).slice(2)}`);
    mkdirSync(join(dir, 'dir/sub'), { recursive: true });
    writeFileSync(join(dir, 'dir/canary'), 'canary\n');
    writeFileSync(join(dir, 'dir/secret'), SECRET, { mode: 0o600 });
    writeFileSync(join(dir, 'dir/sub/file'), 'file\n');
    // A valid layer on the host, which an image's link must not make the converter apply.
    writeFileSync(join(dir, 'layer.tar'), execFileSync('tar', ['-cf', '-', '-C', join(dir, 'dir'), 'canary']));
    return { dir, before: snapshot(dir) };
  }

  /** A docker-save tarball of these layers (tar buffers), manifest and config overridable. */
  async function save(name: string, layerList: LayerEntry[][], manifest: Record<string, unknown> = {}, extra: (dir: string) => void = () => {}): Promise<string> {
    const dir = join(work, name);
    mkdirSync(dir);
    const names: string[] = [];
    for (const [i, entries] of layerList.entries()) {
      writeFileSync(join(dir, `layer${i}.tar`), await layerTar(entries));
      names.push(`layer${i}.tar`);
    }
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ config: { Cmd: ['/bin/server'], User: '1001:1001' } }));
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify([{ Config: 'config.json', Layers: names, ...manifest }]));
    extra(dir);
    return tarOf(dir, join(work, `${name}.tar`));
  }
  const passwd = { name: 'etc/passwd', type: 'file' as const, content: 'root:x:0:0:root:/root:/bin/sh\n' };

  it('writes a later layer inside the image, never through a lower evil -> <host dir>; root is the default user of an image without user', async () => {
    const { dir, before } = host();
    const image = await save('through-evil', [
      [passwd, { name: 'evil', type: 'symlink', linkname: join(dir, 'dir') }],
      [{ name: 'evil/PWNED.txt', type: 'file', content: 'x' }, { name: 'evil/.wh.canary', type: 'file' }, { name: 'evil/sub/.wh..wh..opq', type: 'file' }],
    ]);
    const output = join(work, 'through-evil.ext4');
    const result = convert(image, output, '--entrypoint-once');
    expect(result, result.stderr).toMatchObject({ status: 0 });
    expect(snapshot(dir)).toEqual(before);
    expect(listDir(output, '/evil').sort()).toEqual(['PWNED.txt', 'sub']);
    expect(result.stdout).toContain('default user root (the image has no user account)');
    expect(debugfs(output, 'cat /etc/envd/envd.env')).toContain('ENVD_DEFAULT_USER=root\n');
    // A numeric USER is kept as it is: envd runs the entrypoint as that uid and gid (--entrypoint-once: as before issue 39).
    expect(JSON.parse(debugfs(output, 'cat /etc/envd/entrypoint.json'))).toMatchObject({ args: ['/bin/server'], user: '1001:1001' });
    expect(debugfs(output, 'cat /etc/envd/envd.env')).toContain('ENVD_ENTRYPOINT_FILE=/etc/envd/entrypoint.json\n');
    expect(leftovers()).toEqual([]);
  });

  it.each([
    ['a hard link through a lower link to a host file', [[passwd, { name: 'evil', type: 'symlink', linkname: '/HOST/dir' }], [{ name: 'stolen', type: 'link', linkname: 'evil/secret' }]], {}, () => {}, /layer layer1\.tar: .*stolen/],
    ['a manifest layer that climbs out with ..', [[passwd]], { Layers: ['../outside.tar'] }, () => {}, /layer "\.\.\/outside\.tar" is not a path inside the image/],
    ['a manifest layer with an absolute name', [[passwd]], { Layers: ['/HOST/layer.tar'] }, () => {}, /is not a path inside the image/],
    ['a manifest config that climbs out with ..', [[passwd]], { Config: '../../config.json' }, () => {}, /config "\.\.\/\.\.\/config\.json" is not a path inside the image/],
    ['a manifest layer that is a link to a host file', [[passwd]], { Layers: ['layer0.tar', 'host.tar'] }, (image: string, hostDir: string) => symlinkSync(join(hostDir, 'layer.tar'), join(image, 'host.tar')), /layer "host\.tar" is not a file in the image/],
  ] as const)('refuses %s with exit status 2, the host untouched', async (name, layerList, manifest, extra, message) => {
    const { dir, before } = host();
    const withHost = (text: string) => text.replace('/HOST', dir);
    const fixed = (layerList as unknown as LayerEntry[][]).map((entries) => entries.map((entry) => ({ ...entry, ...(entry.linkname ? { linkname: withHost(entry.linkname) } : {}) })));
    const fixedManifest = JSON.parse(withHost(JSON.stringify(manifest)));
    const image = await save(`refused-${name.replace(/\W+/g, '-')}`, fixed, fixedManifest, (d) => (extra as (image: string, hostDir: string) => void)(d, dir));
    const output = join(work, 'refused.ext4');
    const result = convert(image, output, '--default-user', 'root');
    expect(result.status, result.stderr + result.stdout).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(snapshot(dir)).toEqual(before);
    expect(existsSync(output)).toBe(false);
    expect(leftovers()).toEqual([]);
  });

  it.each([
    ['a digest that climbs out with ..', 'sha256:../../../etc'],
    ['an absolute digest', '/etc/passwd'],
  ])('refuses an OCI layout with %s', (_, digest) => {
    const dir = join(work, `oci-${digest.length}`);
    mkdirSync(join(dir, 'blobs/sha256'), { recursive: true });
    writeFileSync(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ digest, platform: { os: 'linux', architecture: 'amd64' } }] }));
    const result = convert(tarOf(dir, join(work, `oci-${digest.length}.tar`)), join(work, 'oci-refused.ext4'));
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('is not a digest');
    expect(leftovers()).toEqual([]);
  });
});
