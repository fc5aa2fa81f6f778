import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** Root's things beside the user's directory: a 0600 file and a 0700 directory with a file in it. */
export interface Canaries {
  root: string;
  file: string;
  dir: string;
  /** Every canary's path, mode, owner and content now. */
  snapshot(): string;
}

export function makeCanaries(): Canaries {
  const root = mkdtempSync(join(tmpdir(), 'envd-canaries-'));
  chmodSync(root, 0o755);
  const file = join(root, 'secret');
  writeFileSync(file, 'root only\n', { mode: 0o600 });
  const dir = join(root, 'private');
  mkdirSync(dir, { mode: 0o700 });
  for (let i = 0; i < 20; i++) writeFileSync(join(dir, `keep-${i}`), `keep ${i}\n`, { mode: 0o600 });
  const snapshot = () =>
    [root, file, dir, ...readdirSync(dir).map((name) => join(dir, name)), ...readdirSync(root).map((name) => join(root, name))]
      .map((path) => {
        const info = lstatSync(path);
        return `${path} ${info.mode.toString(8)} ${info.uid}:${info.gid} ${info.isFile() ? sha256(readFileSync(path)) : ''}`;
      })
      .sort()
      .join('\n');
  return { root, file, dir, snapshot };
}

