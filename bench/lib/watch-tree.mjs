// The tree a recursive watch is measured on: shaped like a project's
// node_modules (packages, their folders, folders in those), 4,000 directories
// and 10,000 files of a few bytes, so that the cost of watching it is the
// cost of its entries, not of its bytes.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const TREE_DIRECTORIES = 4_000;
export const TREE_FILES = 10_000;

/** Writes the tree under `root` and returns its directories, the root not counted (40 × (1 + 9 × (1 + 10)) = 4,000). */
export function writeTree(root) {
  const directories = [];
  for (let p = 0; p < 40; p++) {
    const pkg = join(root, `package-${p}`);
    directories.push(pkg);
    for (let f = 0; f < 9; f++) {
      const folder = join(pkg, `folder-${f}`);
      directories.push(folder);
      for (let s = 0; s < 10; s++) directories.push(join(folder, `sub-${s}`));
    }
  }
  for (const dir of directories) mkdirSync(dir, { recursive: true });
  for (let i = 0; i < TREE_FILES; i++) writeFileSync(join(directories[i % directories.length], `file-${i}.js`), `module.exports = ${i};\n`);
  return directories;
}
