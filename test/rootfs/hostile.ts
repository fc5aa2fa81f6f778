// Helpers for the hostile-image tests: tar layers with any names an attacker
// can write (absolute, `..`, links anywhere), and a snapshot of a scratch
// directory standing for the build host, so a test can say "nothing outside changed".
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { pack } from 'tar-stream';

export interface LayerEntry {
  name: string;
  type: 'file' | 'directory' | 'symlink' | 'link';
  /** The symlink's target or the hard link's target member. */
  linkname?: string;
  content?: string;
  mode?: number;
}

/** A tar archive of exactly these members, names and link targets verbatim. */
export async function layerTar(entries: LayerEntry[]): Promise<Buffer> {
  const archive = pack();
  const chunks: Buffer[] = [];
  archive.on('data', (chunk) => chunks.push(chunk as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    archive.on('end', resolve);
    archive.on('error', reject);
  });
  for (const entry of entries) {
    const content = entry.type === 'file' ? (entry.content ?? '') : '';
    const header = { name: entry.name, type: entry.type, mode: entry.mode ?? (entry.type === 'directory' ? 0o755 : 0o644), uid: 0, gid: 0, mtime: new Date(0), ...(entry.linkname !== undefined ? { linkname: entry.linkname } : {}) };
    await new Promise<void>((resolve, reject) => archive.entry(header, content, (error) => (error ? reject(error) : resolve())));
  }
  archive.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Every entry under `dir`: type, mode, owner, link target or content hash, inode and mtime. */
export function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (path: string, rel: string) => {
    const stat = lstatSync(path);
    const what = stat.isSymbolicLink() ? `-> ${readlinkSync(path)}` : stat.isFile() ? createHash('sha256').update(readFileSync(path)).digest('hex') : stat.isDirectory() ? 'dir' : 'other';
    out[rel || '.'] = `${what} mode=${stat.mode.toString(8)} uid=${stat.uid} ino=${stat.ino} nlink=${stat.nlink} mtime=${stat.mtimeMs}`;
    if (stat.isDirectory()) for (const name of readdirSync(path).sort()) walk(join(path, name), rel ? `${rel}/${name}` : name);
  };
  walk(dir, '');
  return out;
}

/** The inodes of every regular file under `dir`. */
export function fileInodes(dir: string): Set<number> {
  const found = new Set<number>();
  for (const [, line] of Object.entries(snapshot(dir))) {
    const ino = /ino=(\d+)/.exec(line)![1]!;
    if (!line.startsWith('dir ') && !line.startsWith('-> ') && !line.startsWith('other')) found.add(Number(ino));
  }
  return found;
}
