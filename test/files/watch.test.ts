import { mkdirSync, writeFileSync } from 'node:fs';
import { appendFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { countInotifyWatches } from '../helpers/files.js';
import { waitFor } from '../helpers/proc.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-watch-');

/** Opens a watch, waits for `ready`, and collects `change` events until closed. */
async function openWatch(path: string, recursive?: boolean) {
  const controller = new AbortController();
  const response = await scratch.server.call('POST', '/files/watch', { path, recursive }, { signal: controller.signal });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
  const events = readEvents(response);
  const first = await events.next();
  expect(first.value).toEqual({ event: 'ready', data: { path } });
  const changes: SseEvent['data'][] = [];
  const others: SseEvent[] = [];
  const reading = (async () => {
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
    has: (type: string, p: string) => changes.some((c) => c.type === type && c.path === p),
    async close() {
      controller.abort();
      await reading;
    },
  };
}

describe('POST /files/watch', () => {
  it('reports create, modify and delete with absolute paths', async () => {
    const watch = await openWatch(scratch.dir);
    const file = join(scratch.dir, 'a.txt');
    writeFileSync(file, 'one');
    await waitFor(() => watch.has('create', file), 5_000, 'create');
    await appendFile(file, 'two');
    await waitFor(() => watch.has('modify', file), 5_000, 'modify');
    await unlink(file);
    await waitFor(() => watch.has('delete', file), 5_000, 'delete');
    mkdirSync(join(scratch.dir, 'sub'));
    await waitFor(() => watch.has('create', join(scratch.dir, 'sub')), 5_000, 'create dir');
    await watch.close();
  });

  it('non-recursive reports only direct children; recursive reports nested changes', async () => {
    mkdirSync(join(scratch.dir, 'sub/deeper'), { recursive: true });
    const flat = await openWatch(scratch.dir);
    const deep = await openWatch(scratch.dir, true);
    const nested = join(scratch.dir, 'sub/deeper/n.txt');
    writeFileSync(nested, 'x');
    await waitFor(() => deep.has('create', nested), 5_000, 'nested create in the recursive watch');
    // A direct child written after the nested file: once the flat watch has seen it, it has seen everything before it.
    const direct = join(scratch.dir, 'direct.txt');
    writeFileSync(direct, 'x');
    await waitFor(() => flat.has('create', direct), 5_000, 'direct create');
    expect(flat.changes.some((c) => c.path.startsWith(join(scratch.dir, 'sub/')))).toBe(false);
    await Promise.all([flat.close(), deep.close()]);
  });

  it('answers 404 for a missing directory and 400 for a file, as plain JSON', async () => {
    const missing = await scratch.server.json('POST', '/files/watch', { path: join(scratch.dir, 'nope') });
    expect(missing.status).toBe(404);
    writeFileSync(join(scratch.dir, 'f'), 'x');
    const file = await scratch.server.json('POST', '/files/watch', { path: join(scratch.dir, 'f') });
    expect(file.status).toBe(400);
    expect(file.body.message).toMatch(/not a directory/);
  });

  it('releases every inotify watch when clients disconnect (20 watches opened and closed)', async () => {
    mkdirSync(join(scratch.dir, 'a/b'), { recursive: true });
    const before = countInotifyWatches();
    const watches = [];
    for (let i = 0; i < 20; i++) watches.push(await openWatch(scratch.dir, i % 2 === 0));
    expect(countInotifyWatches()).toBeGreaterThan(before);
    await Promise.all(watches.map((w) => w.close()));
    await waitFor(() => countInotifyWatches() === before, 10_000, 'inotify watches released');
  });
});
