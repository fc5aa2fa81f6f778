// Applies an image layer onto a root directory as overlayfs would have stacked
// it, treating the layer as an attacker's (issue 36 item 1). A lower layer's
// `evil -> /home` must not let this one write `evil/x`, delete `evil/.wh.y`,
// empty `evil/.wh..wh..opq` or hard-link `stolen -> evil/secret` on the build
// host. So:
//   1. GNU tar extracts the layer alone into an empty staging directory beside
//      the root. There nothing points outside: tar refuses `..` members, strips
//      leading `/`, and extracts every symlink that is absolute or has `..` as a
//      placeholder until its last member is written. A hard link to a file of a
//      lower layer fails there (exit 2: bad input), never reaches the host.
//   2. The staging tree is merged into the root, directory by directory: its
//      whiteouts first, then each entry renamed into place (same file system:
//      owners, modes, times and hard links kept). Every root directory is found
//      with resolveInRoot: the image's symlinks are followed as its kernel will
//      follow them, inside the root; an entry's own name is never followed.
import { spawnSync } from 'node:child_process';
import { chmodSync, lchownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, utimesSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { InRootError, removeEntry, resolveInRoot } from './in-root.mjs';

const WHITEOUT = '.wh.';
const OPAQUE = '.wh..wh..opq';

export class LayerError extends Error {}

/** Applies the layer tarball `layer` (any compression tar detects) onto `root`. Throws LayerError for a bad layer. */
export function applyLayer(root, layer) {
  const staging = mkdtempSync(join(dirname(root), '.layer-'));
  try {
    const tar = spawnSync('tar', ['-xpf', layer, '-C', staging, '--numeric-owner'], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    if (tar.error) throw tar.error;
    if (tar.status !== 0) throw new LayerError(`layer ${basename(layer)}: ${tar.stderr.trim().split('\n').slice(0, 3).join('; ')}`);
    mergeDir(root, staging, root);
  } catch (error) {
    if (error instanceof InRootError) throw new LayerError(`layer ${basename(layer)}: ${error.message}`);
    throw error;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** Merges staging directory `from` into `into`, a real directory inside `root`. */
function mergeDir(root, from, into) {
  const names = readdirSync(from);
  // Whiteouts hide what the lower layers had: applied before this layer's own entries.
  if (names.includes(OPAQUE)) for (const name of readdirSync(into)) removeEntry(into, name);
  for (const name of names) {
    if (!name.startsWith(WHITEOUT) || name.startsWith(`${WHITEOUT}${WHITEOUT}`)) continue;
    const hidden = name.slice(WHITEOUT.length);
    if (hidden !== '' && hidden !== '.' && hidden !== '..') removeEntry(into, hidden);
  }
  for (const name of names) {
    if (name.startsWith(WHITEOUT)) continue; // .wh..wh..plnk and other AUFS metadata: never image content
    const source = join(from, name);
    const stat = lstatSync(source);
    if (stat.isDirectory()) mergeDirEntry(root, source, stat, into, name);
    else {
      removeEntry(into, name);
      renameSync(source, join(into, name));
    }
  }
}

/**
 * A directory of the layer at `into/name`: merged into an existing directory,
 * or into the directory an existing symlink leads to inside the root (the way
 * the layer's own write went through it); anything else there is replaced.
 */
function mergeDirEntry(root, source, stat, into, name) {
  const target = join(into, name);
  const existing = lstatSync(target, { throwIfNoEntry: false });
  let dir;
  if (existing?.isDirectory()) dir = target;
  else if (existing?.isSymbolicLink()) dir = followable(root, target);
  if (dir === undefined) {
    removeEntry(into, name);
    mkdirSync(target);
    dir = target;
  }
  mergeDir(root, source, dir);
  // The layer's metadata for the directory, set after its contents changed its times.
  lchownSync(dir, stat.uid, stat.gid);
  chmodSync(dir, stat.mode & 0o7777);
  utimesSync(dir, stat.atime, stat.mtime);
}

/** Where the symlink at host path `link` leads inside `root`, if that is an existing directory there. */
function followable(root, link) {
  try {
    const found = resolveInRoot(root, link.slice(root.length));
    return !found.missing && found.stat.isDirectory() ? found.path : undefined;
  } catch (error) {
    if (error instanceof InRootError) return undefined; // a loop, or through a file: replaced
    throw error;
  }
}
