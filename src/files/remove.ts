import { badRequest } from '../errors.js';
import { removeTree } from './user-tree-remove.js';

/**
 * `rm -r` of a file, a symlink (not its target) or a tree; false when nothing
 * was there. Removed relative to open directories, never following anything
 * (user-path.ts): a user swapping a directory for a symlink meanwhile cannot
 * steer it outside the tree.
 */
export async function removeEntry(path: string): Promise<{ removed: boolean }> {
  if (path === '/') throw badRequest('path: refusing to remove /');
  return { removed: await removeTree(path) };
}
