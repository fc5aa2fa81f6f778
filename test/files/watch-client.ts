import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { EnvdProcess } from '../helpers/proc.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';

/** An authenticated request to some envd (TestServer.call, or callEnvd for a process). */
export type Call = (method: string, path: string, body?: unknown, init?: RequestInit) => Promise<Response>;

export function callEnvd(envd: EnvdProcess, token: string): Call {
  return (method, path, body, init = {}) =>
    fetch(envd.url + path, { ...init, method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

export interface OpenWatch {
  changes: Array<{ type: string; path: string }>;
  /** Events other than `change` and keep-alives (an `error`). */
  others: SseEvent[];
  has(type: string, path: string): boolean;
  /** Resolves when the stream ends (from envd's side, or after close()). */
  ended: Promise<void>;
  close(): Promise<void>;
}

/** Opens a watch, waits for `ready`, and collects events until the stream ends or close(). */
export async function openWatch(call: Call, path: string, recursive?: boolean): Promise<OpenWatch> {
  const controller = new AbortController();
  const response = await call('POST', '/files/watch', { path, recursive }, { signal: controller.signal });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
  const events = readEvents(response);
  const first = await events.next();
  expect(first.value).toEqual({ event: 'ready', data: { path } });
  const changes: OpenWatch['changes'] = [];
  const others: SseEvent[] = [];
  const ended = (async () => {
    try {
      for await (const event of events) {
        if (event.event === 'change') changes.push(event.data);
        else if (event.event !== ':') others.push(event);
      }
    } catch {
      // aborted by close()
    }
  })();
  return {
    changes,
    others,
    ended,
    has: (type, p) => changes.some((c) => c.type === type && c.path === p),
    async close() {
      controller.abort();
      await ended;
    },
  };
}

/**
 * A tree shaped like a project's node_modules: `packages` × (1 + 9 × (1 + 10))
 * directories (40 packages: 4,000) and `files` small files spread over them.
 * Returns the directories, the root not counted.
 */
export function writeTree(root: string, packages: number, files: number): string[] {
  const directories: string[] = [];
  for (let p = 0; p < packages; p++) {
    const pkg = join(root, `package-${p}`);
    directories.push(pkg);
    for (let f = 0; f < 9; f++) {
      const folder = join(pkg, `folder-${f}`);
      directories.push(folder);
      for (let s = 0; s < 10; s++) directories.push(join(folder, `sub-${s}`));
    }
  }
  for (const dir of directories) mkdirSync(dir, { recursive: true });
  for (let i = 0; i < files; i++) writeFileSync(join(directories[i % directories.length]!, `file-${i}.js`), `module.exports = ${i};\n`);
  return directories;
}
