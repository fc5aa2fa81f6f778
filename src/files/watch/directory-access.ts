import { closeSync, constants, lstatSync, openSync, statSync, watch, type FSWatcher, type Stats } from 'node:fs';
import { basename } from 'node:path';
import { O_PATH } from '../user-path.js';
import type { WatchedDirectory } from './watched-directory.js';

// How the watch registry reaches what is in a watched directory: through
// the directory's own O_PATH descriptor, spelled `/proc/self/fd/N/name`
// (user-path.ts), never by a path a user can change.

/**
 * lstat, or null when nothing (or nothing reachable) is at the path.
 * Synchronous on purpose: a batch's answers describe one moment, events stay
 * in order, and a burst waits in the kernel's inotify queue (bounded) instead
 * of as promises in envd's memory.
 */
export function lstatQuietly(path: string): Stats | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

/**
 * Whether the watched directory is still where it was: the same inode under
 * its name in its watched parent; for a client's root, at the path the client
 * asked for (followed like the walk that found it: it may be a symlink; only
 * an inode number is compared, nothing is read or written there).
 */
export function isStillThere(node: WatchedDirectory): boolean {
  try {
    const stats = node.parent ? lstatSync(inside(node.parent.fd, basename(node.path))) : statSync(node.path);
    return stats.isDirectory() && stats.ino === node.ino;
  } catch {
    return false;
  }
}

/** The directory open as `fd`, or a name in it: user-path.ts's spelling (nothing before the name is looked up). */
export function inside(fd: number, name?: string): string {
  return name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

/** A subdirectory opened O_PATH|O_NOFOLLOW; null when it is gone or is no longer a directory (a symlink swapped in included). */
export function openQuietly(path: string): number | null {
  try {
    return openSync(path, O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') return null;
    throw error;
  }
}

/**
 * The path of an entry of a watched directory. Plain concatenation, not
 * path.join: directory paths are normalised already (a client's root went
 * through checkPath) and an entry's name has no slash, and path.join's
 * character loop, run for every entry of a scan, was what V8's optimising
 * compiler compiled first during a cold envd's first big watch (mapping
 * ~5 MiB of its code into envd's RSS).
 */
export function childPath(directory: string, name: string): string {
  return directory.endsWith('/') ? directory + name : `${directory}/${name}`;
}


/**
 * Watches a client root's parent for the root's own name, calling `changed`
 * on any event of it. The root's held descriptor keeps the kernel from
 * saying IN_DELETE_SELF until it is closed (the dentry stays referenced), so
 * a removed root is seen by its parent's IN_DELETE instead. The parent is
 * opened through the root's descriptor (`..`, no name looked up) and closed
 * at once: the watch is on its inode. Undefined when the parent cannot be
 * watched (inotify limits, a pseudo-file system): then only the removal of an
 * empty root goes unseen until its client leaves.
 */
export function watchParent(node: WatchedDirectory, changed: () => void): FSWatcher | undefined {
  const name = basename(node.path);
  let parent: number | undefined;
  try {
    parent = openSync(inside(node.fd, '..'), O_PATH | constants.O_DIRECTORY);
    const watcher = watch(inside(parent), { persistent: false }, (_kind, event) => {
      if (event === name) changed();
    });
    watcher.on('error', () => {});
    return watcher;
  } catch {
    return undefined;
  } finally {
    if (parent !== undefined) closeSync(parent);
  }
}
