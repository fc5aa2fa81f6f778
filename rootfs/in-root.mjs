// Paths inside an image's root directory, resolved the way the image's own
// kernel will resolve them: every symlink on the way is read as if the root
// were / (an absolute target starts again at the root, `..` stops at it), like
// openat2's RESOLVE_IN_ROOT. The image is an attacker's (issue 36 item 1): its
// `etc -> /etc` or `usr/local/lib -> /usr/lib` must never send a write, a
// removal or a read of the build host's files. Node has no openat2, so the walk
// is done here, component by component with lstat. That is sound because the
// tree is data being converted on the build host: nothing else changes it
// while we walk (no live user races the walk, unlike envd's own file routes).
import { chmodSync, copyFileSync, constants, lchownSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

/** Symlinks followed in one resolution before it is a loop: Linux's MAXSYMLINKS. */
const MAX_SYMLINK_HOPS = 40;

/** A path the image makes unusable (a loop, a file where a directory must be); the converter's bad input. */
export class InRootError extends Error {
  constructor(message, code, at) {
    super(message);
    this.code = code;
    /** The host path of the entry at fault. */
    this.at = at;
  }
}

const lstatOrUndefined = (path) => lstatSync(path, { throwIfNoEntry: false });
const components = (path) => path.split('/').filter((part) => part !== '' && part !== '.');

/**
 * Where `path` (absolute or not: both are from the root) is inside `root`.
 * Returns `{ path, stat }` for an existing entry, or `{ missing: true, parent, rest }`
 * when a component does not exist (`parent` is the host path of the deepest
 * existing directory, `rest` the components still to make). The last component
 * is followed when it is a symlink unless `followLast` is false. Throws
 * InRootError for a loop (ELOOP) or a non-directory in the middle (ENOTDIR).
 */
export function resolveInRoot(root, path, { followLast = true } = {}) {
  let parts = components(path);
  const done = [];
  let hops = 0;
  while (parts.length > 0) {
    const name = parts.shift();
    if (name === '..') {
      done.pop();
      continue;
    }
    const here = join(root, ...done, name);
    const stat = lstatOrUndefined(here);
    if (!stat) return { missing: true, parent: join(root, ...done), rest: [name, ...parts] };
    if (stat.isSymbolicLink() && (parts.length > 0 || followLast)) {
      if (++hops > MAX_SYMLINK_HOPS) throw new InRootError(`/${[...done, name].join('/')}: too many levels of symbolic links`, 'ELOOP', here);
      const target = readlinkSync(here);
      if (target.startsWith('/')) done.length = 0;
      parts = [...components(target), ...parts];
      continue;
    }
    if (parts.length > 0 && !stat.isDirectory()) throw new InRootError(`/${[...done, name].join('/')} is not a directory`, 'ENOTDIR', here);
    done.push(name);
    if (parts.length === 0) return { path: here, stat };
  }
  const reached = join(root, ...done);
  return { path: reached, stat: lstatSync(reached) };
}

/**
 * The host path of directory `path` inside `root`, made (0755) where missing.
 * A symlink that loops (`sbin -> /sbin`) is replaced by a directory: the image
 * gets its own, as the kernel could never have used the link. Anything else
 * that is not a directory is an InRootError.
 */
export function ensureDirInRoot(root, path, log = () => {}) {
  // Each round makes one directory or replaces one looping link: bounded by the path and the hops.
  for (let round = 0; round < 4 * MAX_SYMLINK_HOPS + components(path).length + 1; round++) {
    let found;
    try {
      found = resolveInRoot(root, path);
    } catch (error) {
      if (!(error instanceof InRootError) || error.code !== 'ELOOP') throw error;
      log(`/${error.at.slice(root.length + 1)} is a symbolic link loop: replaced by a directory`);
      rmSync(error.at);
      mkdirSync(error.at, { mode: 0o755 });
      continue;
    }
    if (found.missing) {
      mkdirSync(join(found.parent, found.rest[0]), { mode: 0o755 });
      continue;
    }
    if (!found.stat.isDirectory()) throw new InRootError(`/${found.path.slice(root.length + 1)} is not a directory`, 'ENOTDIR', found.path);
    return found.path;
  }
  throw new InRootError(`${path}: could not be made inside the root`, 'ELOOP', root);
}

/** A regular file's text inside `root` (symlinks resolved in it), or undefined when there is none. */
export function readFileInRoot(root, path) {
  const found = resolveInRoot(root, path);
  if (found.missing || !found.stat.isFile()) return undefined;
  return readFileSync(found.path, 'utf8');
}

/** Whether `path` inside `root` is an executable regular file (what the image's kernel would run). */
export function isExecutableInRoot(root, path) {
  try {
    const found = resolveInRoot(root, path);
    return !found.missing && found.stat.isFile() && (found.stat.mode & 0o111) !== 0;
  } catch (error) {
    if (error instanceof InRootError) return false;
    throw error;
  }
}

/** Removes whatever `dir/name` is (a symlink itself, never what it points at; a directory with its contents). */
export function removeEntry(dir, name) {
  rmSync(join(dir, name), { recursive: true, force: true });
}

/** A name beside `name` in `dir` that nothing has: where a new entry is made before it is renamed into place. */
const freshName = (dir, name) => join(dir, `.${name}.envd-${randomBytes(6).toString('hex')}`);

/**
 * Puts a new entry at `dir/name` (dir a real directory inside the root): made
 * under a fresh name by `make(path)`, then renamed over whatever was there, so
 * an existing symlink is replaced, never written through.
 */
function replaceEntry(dir, name, make) {
  const temporary = freshName(dir, name);
  try {
    make(temporary);
    const existing = lstatOrUndefined(join(dir, name));
    if (existing?.isDirectory()) removeEntry(dir, name);
    renameSync(temporary, join(dir, name));
  } catch (error) {
    rmSync(temporary, { recursive: true, force: true });
    throw error;
  }
}

/** Writes `path` inside `root` as a new regular file of `mode`. */
export function writeFileInRoot(root, path, data, mode) {
  const parts = components(path);
  const dir = ensureDirInRoot(root, parts.slice(0, -1).join('/'));
  replaceEntry(dir, parts.at(-1), (temporary) => writeFileSync(temporary, data, { mode, flag: 'wx' }));
}

/**
 * Gives the entry at `path` (a directory with all it holds) to whoever installs:
 * Node's copy keeps the source's owner where it may, and in the converter's user
 * namespace the build host's root is the unmapped 65534, which mkfs.ext4 -d would
 * record. Installed files are the installer's, as writeFileInRoot's are. Then
 * chmod, which the chown may have cleared setuid from.
 */
function ownByInstaller(path) {
  lchownSync(path, process.geteuid(), process.getegid());
  if (lstatSync(path).isDirectory()) for (const name of readdirSync(path)) ownByInstaller(join(path, name));
}

/** Copies the build host's file `source` to `path` inside `root` with `mode`. */
export function copyFileInRoot(root, path, source, mode) {
  const parts = components(path);
  const dir = ensureDirInRoot(root, parts.slice(0, -1).join('/'));
  replaceEntry(dir, parts.at(-1), (temporary) => {
    copyFileSync(source, temporary, constants.COPYFILE_EXCL);
    ownByInstaller(temporary);
    chmodSync(temporary, mode);
  });
  return join(dir, parts.at(-1));
}

/** Makes `path` inside `root` a symlink to `target` (stored verbatim), replacing what was there. */
export function symlinkInRoot(root, path, target) {
  const parts = components(path);
  const dir = ensureDirInRoot(root, parts.slice(0, -1).join('/'));
  replaceEntry(dir, parts.at(-1), (temporary) => symlinkSync(target, temporary));
}

/** Places a whole directory tree made by `make(path)` at `path` inside `root`, replacing what was there. */
export function placeTreeInRoot(root, path, make) {
  const parts = components(path);
  const dir = ensureDirInRoot(root, parts.slice(0, -1).join('/'));
  replaceEntry(dir, parts.at(-1), (temporary) => {
    make(temporary);
    ownByInstaller(temporary);
  });
}
