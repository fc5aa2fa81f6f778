// Hostile archives and the scratch roots they are tried against: hand-made
// tars (tar-stream writes what GNU tar would not), a root full of canaries
// standing for "outside", and a snapshot of everything under a directory to
// prove that nothing there changed.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pack } from 'tar-stream';
import { FileChecksums } from '../../src/files/tar/checksums.js';
import { encodeHeader } from '../../src/files/tar/format.js';

export interface Entry {
  name: string;
  type?: 'file' | 'directory' | 'symlink' | 'link' | 'fifo' | 'character-device';
  linkname?: string;
  mode?: number;
  mtime?: Date;
  body?: string | Buffer;
}

/** A tar of exactly these entries, in order (duplicates, `..`, absolute names and all). */
export async function tarOf(entries: Entry[]): Promise<Buffer> {
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (chunk) => chunks.push(chunk as Buffer));
  const ended = new Promise<void>((resolve) => tar.on('end', () => resolve()));
  for (const { body, ...header } of entries) {
    await new Promise<void>((resolve, reject) => {
      const done = (error?: Error | null) => (error ? reject(error) : resolve());
      const full = { type: 'file', mode: header.type === 'directory' ? 0o755 : 0o644, ...header } as never;
      if ((header.type ?? 'file') === 'file') tar.entry(full, body ?? '', done);
      else tar.entry(full, done);
    });
  }
  tar.finalize();
  await ended;
  return Buffer.concat(chunks);
}

/**
 * `tar` (from tarOf(entries)) as envd sends it with `sha256=true`: each file's
 * sha256 in a manifest after the files, then the tree's own `./` entry, then
 * the end blocks (src/files/tar/checksums.ts), for stand-ins of a sandbox
 * that `envd cp` downloads from.
 */
export function withChecksums(tar: Buffer, entries: Entry[]): Buffer {
  const checksums = new FileChecksums();
  for (const entry of entries) {
    if ((entry.type ?? 'file') !== 'file') continue;
    checksums.update(Buffer.from(entry.body ?? ''));
    checksums.endFile();
  }
  const end = Buffer.alloc(2 * 512);
  if (!tar.subarray(tar.length - end.length).equals(end)) throw new Error('withChecksums: the tar does not end with its end blocks');
  const root = encodeHeader({ name: '.', type: 'directory', mode: 0o755, uid: 0, gid: 0, size: 0, mtime: 0, linkname: '' });
  return Buffer.concat([tar.subarray(0, tar.length - end.length), checksums.manifest(true)!, root, end]);
}

/**
 * Canaries around a target: files, a 0600 secret, a directory `outside`
 * with files in it, and links pointing at them, which an escaping archive
 * would write through, replace or remove.
 */
export function plantCanaries(root: string): void {
  mkdirSync(join(root, 'outside/deep'), { recursive: true });
  writeFileSync(join(root, 'outside/canary.txt'), 'canary');
  writeFileSync(join(root, 'outside/deep/canary.txt'), 'deep canary');
  writeFileSync(join(root, 'secret'), 'secret', { mode: 0o600 });
  writeFileSync(join(root, 'x'), 'x canary');
  symlinkSync('outside', join(root, 'to-outside'));
  symlinkSync(join(root, 'outside'), join(root, 'abs-outside'));
  chmodSync(join(root, 'outside'), 0o755);
}

/** Every entry under `root` but `skip` (names at its top): kind, mode, owner, mtime (unless `times` is false), content hash or link target. */
export function snapshot(root: string, skip: (name: string) => boolean = () => false, times = true, dir = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(join(root, dir)).sort()) {
    const rel = join(dir, name);
    if (dir === '' && skip(name)) continue;
    const info = lstatSync(join(root, rel));
    const meta = `${(info.mode & 0o7777).toString(8)} ${info.uid}:${info.gid}`;
    if (info.isSymbolicLink()) out[rel] = `link ${meta} -> ${readlinkSync(join(root, rel))}`;
    else if (info.isDirectory()) {
      out[rel] = `dir ${meta}${times ? ` ${info.mtimeMs}` : ''}`;
      Object.assign(out, snapshot(root, skip, times, rel));
    } else out[rel] = `file ${meta}${times ? ` ${info.mtimeMs}` : ''} ${createHash('sha256').update(readFileSync(join(root, rel))).digest('hex')}`;
  }
  return out;
}

/** Runs dist/envd with the server's URL and token, as `user` if given. */
export function runEnvd(args: string[], server: { url: string; token: string }, user?: { uid: number; gid: number }): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(`${process.cwd()}/dist/envd`, args, {
      env: { PATH: process.env.PATH, HOME: '/', ENVD_URL: server.url, ENVD_TOKEN: server.token },
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(user ? { uid: user.uid, gid: user.gid } : {}),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}
