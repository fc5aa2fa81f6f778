import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { request } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

/** inotify watches (not instances) a process holds: libuv shares one inotify fd per loop, so count its `wd` lines. */
export function countInotifyWatches(pid: number | 'self' = 'self'): number {
  let watches = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) !== 'anon_inode:inotify') continue;
      watches += readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8').split('\n').filter((line) => line.startsWith('inotify wd:')).length;
    } catch {
      // closed while we looked
    }
  }
  return watches;
}

/** Bytes generated on the fly (never held whole): `total` zero bytes in 1 MiB chunks. */
export async function* zeros(total: number): AsyncGenerator<Buffer> {
  const chunk = Buffer.alloc(1024 * 1024);
  for (let left = total; left > 0; left -= chunk.length) yield left >= chunk.length ? chunk : chunk.subarray(0, left);
}

export interface RawResult {
  status: number;
  body: any;
}

/**
 * PUT /files/raw with node:http, which (unlike fetch) lets a test declare any
 * Content-Length and stream a chunked body. Resolves with the answer as soon
 * as it arrives, even while the body is still being sent.
 */
export function putRaw(url: string, token: string, query: string, body: AsyncIterable<Buffer> | Buffer, headers: Record<string, string> = {}): Promise<RawResult> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/files/raw?${query}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', ...headers },
    });
    req.on('response', async (res) => {
      let text = '';
      res.setEncoding('utf8');
      try {
        for await (const chunk of res) text += chunk;
      } catch {
        // the server closed right after answering; what arrived is the answer
      }
      resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined });
    });
    // A server that answers early and closes makes the rest of the body fail to send; only a missing answer is an error.
    req.on('error', (error) => setTimeout(() => reject(error), 2_000));
    pipeline(Buffer.isBuffer(body) ? Readable.from([body]) : Readable.from(body), req).catch(() => {});
  });
}

/** Runs a command, throwing with its output when it fails. */
export function sh(command: string, args: string[]): string {
  return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

export const isRoot = process.getuid?.() === 0;
