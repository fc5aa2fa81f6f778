// Image layers are an attacker's (issue 36 item 1): rootfs/layers.mjs applies
// them onto a root beside a scratch "host" of canaries, and nothing a layer
// stack does (symlinks to the host, whiteouts and opaque directories through
// them, hard links, `..`, absolute names) changes the host or brings a host
// file into the root. The image's own symlinks still work inside the root.
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
// @ts-expect-error: rootfs/ is plain ESM JavaScript run by node on the build host, with no type declarations.
import { applyLayer, LayerError } from '../../rootfs/layers.mjs';
import { fileInodes, layerTar, snapshot, type LayerEntry } from './hostile.js';

const scratch = mkdtempSync(join(tmpdir(), 'envd-layers-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const SECRET = 'host secret: must never reach an image\n';

let host: string;
let root: string;
let runs = 0;
/** A fresh host of canaries and an empty root beside it (the converter's work directory). */
function fresh(): void {
  const base = join(scratch, String(runs++));
  host = join(base, 'host');
  root = join(base, 'work', 'root');
  mkdirSync(join(host, 'dir/sub'), { recursive: true });
  writeFileSync(join(host, 'dir/canary'), 'canary\n');
  writeFileSync(join(host, 'dir/secret'), SECRET, { mode: 0o600 });
  writeFileSync(join(host, 'dir/sub/file'), 'in a host subdirectory\n');
  mkdirSync(root, { recursive: true });
}
beforeEach(fresh);

let layers = 0;
async function apply(entries: LayerEntry[]): Promise<void> {
  const file = join(scratch, `layer-${layers++}.tar`);
  writeFileSync(file, await layerTar(entries));
  applyLayer(root, file);
}

const file = (name: string, content = name) => ({ name, type: 'file' as const, content });
const symlink = (name: string, linkname: string) => ({ name, type: 'symlink' as const, linkname });

describe('an image layer over a lower layer that links to the host', () => {
  it('writes files, whiteouts and opaque directories inside the root, never through evil -> <host dir>', async () => {
    const before = snapshot(host);
    await apply([symlink('evil', join(host, 'dir')), symlink('climb', '../../host/dir'), file('kept')]);
    await apply([file('evil/PWNED.txt'), file('evil/.wh.canary', ''), file('evil/sub/.wh..wh..opq', ''), file('climb/PWNED2.txt'), file('climb/.wh.secret', '')]);
    expect(snapshot(host)).toEqual(before);
    // The layer's directory replaced the link, which led nowhere inside the root.
    expect(lstatSync(join(root, 'evil')).isDirectory()).toBe(true);
    expect(readFileSync(join(root, 'evil/PWNED.txt'), 'utf8')).toBe('evil/PWNED.txt');
    expect(readFileSync(join(root, 'climb/PWNED2.txt'), 'utf8')).toBe('climb/PWNED2.txt');
    expect(readFileSync(join(root, 'kept'), 'utf8')).toBe('kept');
  });

  it('refuses a hard link through the link to a host file (exit 2 in the converter), copying nothing', async () => {
    const before = snapshot(host);
    await apply([symlink('evil', join(host, 'dir'))]);
    await expect(apply([{ name: 'stolen', type: 'link', linkname: 'evil/secret' }])).rejects.toBeInstanceOf(LayerError);
    await expect(apply([{ name: 'stolen', type: 'link', linkname: join(host, 'dir/secret') }])).rejects.toBeInstanceOf(LayerError);
    expect(snapshot(host)).toEqual(before);
    expect(lstatSync(join(root, 'stolen'), { throwIfNoEntry: false })).toBeUndefined();
  });

  it('follows the image’s own links inside the root, as its kernel will (lib -> usr/lib, an absolute /opt -> /srv)', async () => {
    await apply([{ name: 'usr/lib/', type: 'directory' }, symlink('lib', 'usr/lib'), { name: 'srv/', type: 'directory' }, symlink('opt', '/srv'), file('usr/lib/old')]);
    await apply([file('lib/new'), file('opt/app'), file('lib/.wh.old', '')]);
    expect(readFileSync(join(root, 'usr/lib/new'), 'utf8')).toBe('lib/new');
    expect(readFileSync(join(root, 'srv/app'), 'utf8')).toBe('opt/app');
    expect(lstatSync(join(root, 'usr/lib/old'), { throwIfNoEntry: false })).toBeUndefined();
    expect(readlinkSync(join(root, 'lib'))).toBe('usr/lib');
  });

  it('applies a plain stack: whiteouts remove, an opaque directory hides the lower contents, hard links within a layer stay links', async () => {
    await apply([file('dir/a'), file('dir/b'), file('gone')]);
    await apply([file('.wh.gone', ''), file('dir/.wh..wh..opq', ''), file('dir/c'), { name: 'dir/c-link', type: 'link', linkname: 'dir/c' }]);
    expect(snapshot(root)).toMatchObject({ 'dir/c': expect.stringContaining('nlink=2') });
    expect(Object.keys(snapshot(root)).sort()).toEqual(['.', 'dir', 'dir/c', 'dir/c-link']);
  });

  // A whiteout named `.wh..` once meant `rm -rf root/..`.
  it('ignores whiteouts of "." and ".." and AUFS metadata', async () => {
    mkdirSync(join(root, 'x'));
    writeFileSync(join(root, 'x/keep'), '');
    await apply([file('x/.wh..', ''), file('x/.wh...', ''), file('.wh..wh..plnk', '')]);
    expect(Object.keys(snapshot(join(root, '..'))).sort()).toEqual(['.', 'root', 'root/x', 'root/x/keep']);
  });
});

describe('random layer stacks (fast-check)', () => {
  it('never change the host and never bring a host file into the root', async () => {
    const hostNames = () => [join(host, 'dir'), join(host, 'dir/secret'), join(host, 'dir/sub'), host, '/'];
    // Names: plain, nested, through the links, whiteouts, opaque markers, `..` and absolute ones.
    const part = fc.constantFrom('a', 'b', 'evil', 'up', '..', '.', '.wh.canary', '.wh.secret', '.wh..wh..opq', '.wh.a', 'secret', 'canary', 'sub');
    const name = fc.oneof(fc.array(part, { minLength: 1, maxLength: 4 }).map((parts) => parts.join('/')), fc.array(part, { minLength: 1, maxLength: 3 }).map((parts) => `/${parts.join('/')}`));
    const target = fc.oneof(
      name,
      fc.constantFrom('HOST_DIR', 'HOST_SECRET', 'HOST_SUB', 'HOST', '/', '../../host/dir', '../../../host/dir/secret', '../..', '..', '.', 'evil', 'evil/secret'),
    );
    const entry = fc.record({ kind: fc.constantFrom('file', 'directory', 'symlink', 'link'), name, target });
    const stack = fc.array(fc.array(entry, { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 3 });
    let applied = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(stack, async (layerList) => {
        fresh();
        const [hostDir, hostSecret, hostSub, hostItself] = hostNames();
        const resolveTarget = (text: string) => ({ HOST_DIR: hostDir, HOST_SECRET: hostSecret, HOST_SUB: hostSub, HOST: hostItself })[text] ?? text;
        const before = snapshot(host);
        const hostInodes = fileInodes(host);
        for (const entries of layerList) {
          try {
            await apply(
              entries.map(({ kind, name: entryName, target: linkTarget }) =>
                kind === 'file' ? file(entryName, SECRET.slice(0, 5)) : kind === 'directory' ? { name: entryName, type: 'directory' as const } : { name: entryName, type: kind as 'symlink' | 'link', linkname: resolveTarget(linkTarget) },
              ),
            );
            applied++;
          } catch (error) {
            if (!(error instanceof LayerError)) throw error;
            refused++;
          }
          expect(snapshot(host)).toEqual(before);
        }
        // Nothing in the root is a host file (a hard link) or holds its secret.
        const rootSnapshot = snapshot(join(root, '..'));
        for (const ino of fileInodes(join(root, '..'))) expect(hostInodes.has(ino)).toBe(false);
        for (const [path, line] of Object.entries(rootSnapshot)) {
          if (/^[0-9a-f]{64} /.test(line)) expect(readFileSync(join(root, '..', path), 'utf8'), path).not.toBe(SECRET);
        }
        // Only the root and the staging leftovers' absence: the work directory holds nothing else.
        expect(Object.keys(rootSnapshot).filter((path) => path !== '.' && !path.startsWith('root'))).toEqual([]);
      }),
      { numRuns: 150 },
    );
    // Both outcomes were exercised: layers applied, and layers refused (hard links out of the layer).
    expect(applied).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  }, 240_000);
});

// A link inside the root that leads to itself must not hang the merge.
it('replaces a lower link that loops when a layer writes a directory through it', async () => {
  symlinkSync('/loop', join(root, 'loop'));
  await apply([file('loop/x')]);
  expect(readFileSync(join(root, 'loop/x'), 'utf8')).toBe('loop/x');
});
