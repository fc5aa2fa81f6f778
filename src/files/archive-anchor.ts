import { existsSync } from 'node:fs';
import { mkdir, rm, rmdir, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Owner } from './paths.js';
import { reopenPath } from './user-file.js';
import { openParent } from './user-path.js';
import { removeTreeAt } from './user-tree-remove.js';

/**
 * Where an extraction's target lives: its parent opened by user-path.ts's
 * walk (root never follows what another user can change), and names in it
 * for one call each. Where there is no /proc (`envd cp` on a developer's
 * macOS) plain paths instead: the developer's own machine, no other user to race.
 */
export interface TargetParent {
  /** The target's own name in the parent. */
  readonly name: string;
  /** A path for one name in the parent, for one fs call (never followed through the parent's path). */
  at(name: string): string;
  /** The name's path, for messages only. */
  child(name: string): string;
  /** rm -r of one name, following nothing. */
  removeTree(name: string): Promise<void>;
  close(): Promise<void>;
}

let procFds: boolean | undefined;
const hasProcFds = () => (procFds ??= existsSync('/proc/self/fd'));

/** The target's parent, made (0755, the owner's) where missing; `created` is the topmost directory made. */
export async function openTargetParent(dir: string, owner: Owner | undefined): Promise<{ parent: TargetParent; created: string | undefined }> {
  if (hasProcFds()) {
    const { dir: opened, created, name } = await openParent(dir, { owner, create: true });
    return {
      parent: { name, at: (n) => opened.at(n), child: (n) => opened.child(n), removeTree: async (n) => void (await removeTreeAt(opened, n)), close: () => opened.close() },
      created,
    };
  }
  const base = dirname(dir);
  const created = await mkdir(base, { recursive: true });
  const at = (n: string) => join(base, n);
  return { parent: { name: basename(dir), at, child: at, removeTree: (n) => rm(at(n), { recursive: true, force: true }), close: async () => {} }, created };
}

/** The parents openTargetParent made, removed from the innermost up to `created` while they are empty (another request may be using them). */
export async function removeMadeParents(dir: string, created: string, owner: Owner | undefined): Promise<void> {
  for (let at = dirname(dir); ; at = dirname(at)) {
    try {
      if (!hasProcFds()) await rmdir(at);
      else {
        const { dir: opened, name } = await openParent(at, { owner });
        try {
          await rmdir(opened.at(name));
        } finally {
          await opened.close();
        }
      }
    } catch {
      return; // not empty, or gone: left as it is
    }
    if (at === created || at === dirname(at)) return;
  }
}

/**
 * A path the kernel resolves to the open directory `handle` itself
 * (`/proc/self/fd/N`, no name looked up again): renaming it away and putting
 * a symlink in its place steers nothing. `fallback` where there is no /proc.
 */
export function pathOfDescriptor(handle: FileHandle, fallback: string): string {
  return hasProcFds() ? reopenPath(handle) : fallback;
}
