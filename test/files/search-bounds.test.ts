import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LIST_CHUNK_MAX_BYTES, WALK_MAX_DEPTH } from '../../src/files/search/walk.js';
import { useScratchServer } from '../helpers/scratch-server.js';

// A tree is a user's, so an attacker's: what a walk holds is bounded. A
// directory larger than one listing call is read in parts (every entry still
// found, its ignore files still read), and a walk goes no deeper than
// WALK_MAX_DEPTH directories, saying so with truncated: true.

const scratch = useScratchServer('envd-search-bounds-');

async function find(query: string): Promise<{ entries: { path: string }[]; truncated: boolean }> {
  const response = await scratch.server.call('GET', `/files/find?path=${encodeURIComponent(scratch.dir)}&max_results=100000&${query}`);
  expect(response.status).toBe(200);
  return (await response.json()) as { entries: { path: string }[]; truncated: boolean };
}

async function search(pattern: string): Promise<any[]> {
  const response = await scratch.server.call('POST', '/files/search', { path: scratch.dir, pattern, literal: true });
  expect(response.status).toBe(200);
  return (await response.text()).split('\n').filter(Boolean).map((line) => JSON.parse(line));
}

describe('the walk of search and find, bounded', () => {
  it('walks a directory larger than one listing call in parts: every file, its .gitignore read, whatever part it is in', async () => {
    const name = (i: number) => `a-file-with-a-long-enough-name-${String(i).padStart(5, '0')}.txt`;
    const count = Math.ceil((2.5 * LIST_CHUNK_MAX_BYTES) / (name(0).length + 2));
    mkdirSync(join(scratch.dir, '.git'));
    writeFileSync(join(scratch.dir, '.gitignore'), '*.log\n');
    for (let i = 0; i < count; i++) writeFileSync(join(scratch.dir, name(i)), i === count - 1 ? 'needle\n' : '');
    for (let i = 0; i < 20; i++) writeFileSync(join(scratch.dir, `ignored-${i}.log`), 'needle\n');
    const listed = await find('');
    expect(listed.truncated).toBe(false);
    expect(listed.entries).toHaveLength(count);
    expect(new Set(listed.entries.map((entry) => entry.path))).toEqual(new Set(Array.from({ length: count }, (_, i) => join(scratch.dir, name(i)))));
    const events = await search('needle');
    expect(events.filter((event) => event.type === 'match').map((event) => event.path)).toEqual([join(scratch.dir, name(count - 1))]);
    expect(events.at(-1)).toMatchObject({ type: 'summary', truncated: false, files_matched: 1 });
  });

  it(`goes no deeper than ${WALK_MAX_DEPTH} directories and says the answer is truncated`, async () => {
    let dir = scratch.dir;
    for (let depth = 1; depth <= WALK_MAX_DEPTH + 2; depth++) {
      dir = join(dir, 'd');
      mkdirSync(dir);
      if (depth === 10) writeFileSync(join(dir, 'shallow.txt'), 'needle\n');
      if (depth === WALK_MAX_DEPTH) writeFileSync(join(dir, 'last.txt'), 'needle\n');
    }
    writeFileSync(join(dir, 'deep.txt'), 'needle\n');
    const listed = await find('glob=*.txt');
    // Depth first, in name order: `d` comes before `shallow.txt`.
    expect(listed.entries.map((entry) => entry.path.split('/').pop())).toEqual(['last.txt', 'shallow.txt']);
    expect(listed.truncated).toBe(true);
    const events = await search('needle');
    expect(events.filter((event) => event.type === 'match').map((event) => event.path.split('/').pop())).toEqual(['last.txt', 'shallow.txt']);
    expect(events.at(-1)).toMatchObject({ type: 'summary', truncated: true, matches: 2 });
    // From two levels down, deep.txt is WALK_MAX_DEPTH directories deep: all there, not truncated.
    const within = await scratch.server.call('GET', `/files/find?path=${encodeURIComponent(join(scratch.dir, 'd', 'd'))}&glob=*.txt`);
    const answer = (await within.json()) as { entries: { path: string }[]; truncated: boolean };
    expect(answer.entries.map((entry) => entry.path.split('/').pop())).toEqual(['deep.txt', 'last.txt', 'shallow.txt']);
    expect(answer.truncated).toBe(false);
  });
});
