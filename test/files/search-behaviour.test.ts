import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_CONTEXT_LINES, MAX_PATTERN_CHARS } from '../../src/files/search/schemas.js';
import { useScratchServer } from '../helpers/scratch-server.js';
import { createTestUser, isRoot, type TestUser } from '../helpers/users.js';

const scratch = useScratchServer('envd-search-');

async function search(body: Record<string, unknown>): Promise<{ status: number; events: any[] }> {
  const response = await scratch.server.call('POST', '/files/search', { path: scratch.dir, ...body });
  const text = await response.text();
  if (response.status !== 200) return { status: response.status, events: [JSON.parse(text)] };
  return { status: 200, events: text.split('\n').filter(Boolean).map((line) => JSON.parse(line)) };
}

/** A file on which `(a+)+$` backtracks exponentially on every line: only the linear engine gets through it. */
function writeCatastrophicFile(path: string, megabytes: number): void {
  const line = `${'a'.repeat(40)}!\n`;
  writeFileSync(path, line.repeat(Math.ceil((megabytes * 1024 * 1024) / line.length)));
}

describe('POST /files/search', () => {
  it('refuses a bad pattern, a backreference and out-of-range fields with 400, naming the field', async () => {
    writeFileSync(join(scratch.dir, 'a.txt'), 'x\n');
    const bad = await search({ pattern: 'a(b' });
    expect(bad.status).toBe(400);
    expect(bad.events[0].message).toMatch(/^pattern: /);
    expect((await search({ pattern: '(a)\\1' })).events[0].message).toMatch(/pattern: .*linear/);
    expect((await search({ pattern: 'x'.repeat(MAX_PATTERN_CHARS + 1) })).status).toBe(400);
    expect((await search({ pattern: 'x'.repeat(MAX_PATTERN_CHARS), literal: true })).status).toBe(200);
    expect((await search({ pattern: 'x', context: MAX_CONTEXT_LINES + 1 })).status).toBe(400);
    expect((await search({ pattern: 'x', path: 'relative' })).status).toBe(400);
    expect((await search({ pattern: 'x', path: join(scratch.dir, 'none') })).status).toBe(404);
    expect((await search({ pattern: 'x', username: 'no-such-user-here' })).status).toBe(400);
  });

  it('streams matches then a summary; max_results and max_per_file truncate', async () => {
    for (let i = 0; i < 5; i++) writeFileSync(join(scratch.dir, `f${i}.txt`), 'hit\nmiss\nhit\n');
    const all = await search({ pattern: 'hit' });
    expect(all.events.at(-1)).toMatchObject({ type: 'summary', files_scanned: 5, files_matched: 5, matches: 10, truncated: false, timed_out: false });
    const capped = await search({ pattern: 'hit', max_results: 3 });
    expect(capped.events.filter((e) => e.type === 'match')).toHaveLength(3);
    expect(capped.events.at(-1)).toMatchObject({ matches: 3, truncated: true });
    const perFile = await search({ pattern: 'hit', max_per_file: 1 });
    expect(perFile.events.filter((e) => e.type === 'match').map((e) => e.line)).toEqual([1, 1, 1, 1, 1]);
  });

  it('searches one file given as path, and does not follow symlinks or open FIFOs', async () => {
    writeFileSync(join(scratch.dir, 'real.txt'), 'needle\n');
    mkdirSync(join(scratch.dir, 'elsewhere'));
    writeFileSync(join(scratch.dir, 'elsewhere/other.txt'), 'needle\n');
    symlinkSync(join(scratch.dir, 'real.txt'), join(scratch.dir, 'link.txt'));
    symlinkSync(join(scratch.dir, 'elsewhere'), join(scratch.dir, 'linkdir'));
    execFileSync('mkfifo', [join(scratch.dir, 'pipe')]);
    const { events } = await search({ pattern: 'needle' });
    expect(events.filter((e) => e.type === 'match').map((e) => e.path).sort()).toEqual([join(scratch.dir, 'elsewhere/other.txt'), join(scratch.dir, 'real.txt')]);
    const one = await search({ pattern: 'needle', path: join(scratch.dir, 'real.txt') });
    expect(one.events[0]).toMatchObject({ path: join(scratch.dir, 'real.txt'), line: 1, column: 1, text: 'needle' });
  });

  it('stops at its time budget and says so in the summary', async () => {
    writeCatastrophicFile(join(scratch.dir, 'big.txt'), 8);
    const { events } = await search({ pattern: '(a+)+$', timeout_ms: 50 });
    expect(events.at(-1)).toMatchObject({ type: 'summary', truncated: true, timed_out: true });
    expect(events.at(-1).elapsed_ms).toBeLessThan(5000);
  });

  it('keeps /health answering while (a+)+$ runs over megabytes', async () => {
    writeCatastrophicFile(join(scratch.dir, 'big.txt'), 4);
    const running = search({ pattern: '(a+)+$' });
    let slowest = 0;
    for (let i = 0; i < 40; i++) {
      const started = performance.now();
      expect((await scratch.server.call('GET', '/health')).status).toBeLessThan(300);
      slowest = Math.max(slowest, performance.now() - started);
    }
    const { events } = await running;
    expect(events.at(-1)).toMatchObject({ type: 'summary', files_scanned: 1, matches: 0, timed_out: false });
    // A stalled loop would hold /health for the whole search (seconds); bench/search.mjs measures the p99.
    expect(slowest).toBeLessThan(1000);
  });

  it('stops within 100 ms when its client disconnects', async () => {
    writeCatastrophicFile(join(scratch.dir, 'big.txt'), 16);
    const abort = new AbortController();
    const response = await scratch.server.call('POST', '/files/search', { path: scratch.dir, pattern: '(a+)+$' }, { signal: abort.signal });
    expect(response.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const abortedAt = Date.now();
    abort.abort();
    let ended: any;
    while (!ended && Date.now() - abortedAt < 5000) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      ended = scratch.server.logs.map((line) => JSON.parse(line)).find((log) => log.msg === 'search ended' && log.path === scratch.dir && log.client_gone);
    }
    expect(ended).toBeDefined();
    // From the moment envd saw the disconnect; from the client's abort, a loaded machine adds its scheduling delay.
    expect(ended.stopped_after_disconnect_ms).toBeLessThan(100);
    expect(Date.parse(ended.time) - abortedAt).toBeLessThan(1000);
  });
});

describe.skipIf(!isRoot())('POST /files/search with the permissions of username', () => {
  let user: TestUser;
  beforeAll(async () => {
    user = await createTestUser();
  });
  afterAll(() => user?.remove());

  it('finds only what the user could read, and everything as root', async () => {
    const put = (rel: string, mode: number) => {
      writeFileSync(join(scratch.dir, rel), 'needle\n');
      chmodSync(join(scratch.dir, rel), mode);
    };
    chmodSync(scratch.dir, 0o755);
    put('public.txt', 0o644);
    put('private.txt', 0o600);
    mkdirSync(join(scratch.dir, 'closed'), { mode: 0o700 });
    put('closed/inside.txt', 0o644);
    mkdirSync(join(scratch.dir, 'group'), { mode: 0o750 });
    execFileSync('chgrp', [String(user.extraGroup.gid), join(scratch.dir, 'group')]);
    put('group/shared.txt', 0o640);
    execFileSync('chgrp', [String(user.extraGroup.gid), join(scratch.dir, 'group/shared.txt')]);
    const paths = async (username: string) => (await search({ pattern: 'needle', username })).events.filter((e) => e.type === 'match').map((e) => e.path.slice(scratch.dir.length + 1)).sort();
    expect(await paths(user.name)).toEqual(['group/shared.txt', 'public.txt']);
    expect(await paths('root')).toEqual(['closed/inside.txt', 'group/shared.txt', 'private.txt', 'public.txt']);
    const denied = await search({ pattern: 'needle', username: user.name, path: join(scratch.dir, 'closed') });
    expect(denied.status).toBe(403);
  });
});
