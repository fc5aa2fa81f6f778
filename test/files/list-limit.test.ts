import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LIST_ENTRY_LIMIT } from '../../src/files/list.js';
import { useScratchServer } from '../helpers/scratch-server.js';

// GET /files/list builds its answer in memory, so it stops with 413 past
// LIST_ENTRY_LIMIT entries, and says so before describing any of them.

const scratch = useScratchServer('envd-list-limit-');

describe('GET /files/list at its entry limit', () => {
  it(`lists ${LIST_ENTRY_LIMIT} entries, and answers 413 at one more without describing them first`, { timeout: 120_000 }, async () => {
    for (let i = 0; i < LIST_ENTRY_LIMIT; i++) writeFileSync(join(scratch.dir, `f${i}`), '');
    const list = () => scratch.server.call('GET', `/files/list?path=${encodeURIComponent(scratch.dir)}`);
    const full = await list();
    expect(full.status).toBe(200);
    expect(((await full.json()) as { entries: unknown[] }).entries).toHaveLength(LIST_ENTRY_LIMIT);
    writeFileSync(join(scratch.dir, 'one-more'), '');
    const over = await list();
    expect(over.status).toBe(413);
    expect(((await over.json()) as { message: string }).message).toBe(`${scratch.dir}: more than ${LIST_ENTRY_LIMIT} entries; list with a smaller depth or a deeper path`);
  });
});
