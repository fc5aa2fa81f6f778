import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { compilePattern } from '../../src/files/search/pattern.js';
import { prepareSearch } from '../../src/files/search/search.js';
import { loadSearchCalls, type SearchCalls } from '../../src/native/search-calls.js';

// Where the addon does not load, search opens children by /proc/self/fd
// paths and runs its byte loops in JavaScript: the answers must be the same.

let root: string;
let calls: SearchCalls;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'envd-search-fallback-'));
  mkdirSync(join(root, '.git'));
  writeFileSync(join(root, '.gitignore'), 'ignored/\n*.log\n');
  mkdirSync(join(root, 'src', 'deep'), { recursive: true });
  mkdirSync(join(root, 'ignored'));
  writeFileSync(join(root, 'src', 'a.js'), 'const server = createServer();\nfunction readSync(x) {}\n');
  // Larger than one chunk, the match near its end: line numbers come from the chunks before.
  writeFileSync(join(root, 'src', 'deep', 'big.js'), `${'filler line\n'.repeat(20_000)}createServer at the end\nfunction openSync(a) {}\n`);
  writeFileSync(join(root, 'src', 'bin.dat'), Buffer.concat([Buffer.from('createServer\n'), Buffer.from([0]), Buffer.from('createServer\n')]));
  writeFileSync(join(root, 'ignored', 'x.js'), 'createServer\n');
  writeFileSync(join(root, 'debug.log'), 'createServer\n');
  writeFileSync(Buffer.concat([Buffer.from(`${root}/src/`), Buffer.from([0x6e, 0xe9, 0x2e, 0x6a, 0x73])]), 'createServer in a latin-1 name\n');
  // Names whose byte order is not JavaScript's string order: both paths list in byte order.
  for (const name of ['\u{1F600}.js', '\uFF21.js', 'Z.js', 'b.js']) writeFileSync(join(root, 'src', name), 'createServer\n');
  const loaded = loadSearchCalls(root, createLogger('error'));
  if (!loaded) throw new Error('the addon did not load (npm run build)');
  calls = loaded;
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function searchWith(searchCalls: SearchCalls | undefined, pattern: string, literal: boolean): Promise<unknown[]> {
  let text = '';
  const run = prepareSearch({
    root,
    pattern: compilePattern(pattern, literal, 'smart'),
    walk: { hidden: false, gitignore: true, include: [], exclude: [], reader: undefined, searchCalls },
    scan: { context: 1, maxPerFile: Number.POSITIVE_INFINITY, maxFileBytes: 0, bytes: searchCalls },
    maxResults: Number.POSITIVE_INFINITY,
    timeoutMs: 60_000,
  });
  const summary = await run({ write: (chunk) => void (text += chunk), waitForRoom: async () => {}, gone: false });
  return [...text.trim().split('\n').map((line) => JSON.parse(line)), { ...summary, elapsed_ms: 0 }];
}

describe('search without the addon', () => {
  for (const [pattern, literal] of [['createServer', true], ['function\\s+\\w+Sync\\(', false], ['createserver', false]] as const) {
    it(`answers as it does with the addon: ${pattern}`, async () => {
      const native = await searchWith(calls, pattern, literal);
      const fallback = await searchWith(undefined, pattern, literal);
      expect(native.length).toBeGreaterThan(2);
      expect(fallback).toEqual(native);
      if (literal) {
        const order = native.flatMap((match) => ((match as { path?: string }).path?.match(/src\/([^/]+)\.js$/) ?? []).slice(1));
        expect(order.filter((name) => ['\u{1F600}', '\uFF21', 'Z', 'b'].includes(name))).toEqual(['Z', 'b', '\uFF21', '\u{1F600}']);
      }
    });
  }

  it('finds the match after many chunks on its true line', async () => {
    const found = (await searchWith(calls, 'createServer', true)) as Array<{ path?: string; line?: number }>;
    expect(found.find((match) => match.path?.endsWith('big.js'))?.line).toBe(20_001);
  });
});
