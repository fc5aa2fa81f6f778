import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { compilePattern } from '../../src/files/search/pattern.js';
import { prepareSearch, type SearchSink } from '../../src/files/search/search.js';
import { SEARCH_BATCH_ARENA_BYTES, SEARCH_BATCH_FILES, SEARCH_BATCHES_IN_FLIGHT } from '../../src/files/search/file-batches.js';
import { loadSearchCalls, type SearchCalls } from '../../src/native/search-calls.js';

// A search hands its files to the thread pool in batches (file-batches.ts):
// many batches in flight must still give the answer of the event loop alone,
// in the same order, within a bounded number of jobs and bytes, and stop
// (closing every descriptor) when the client leaves or the time runs out.

const DIRS = 8;
const FILES_PER_DIR = 150;
let root: string;
let calls: SearchCalls;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'envd-search-batches-'));
  for (let d = 0; d < DIRS; d++) {
    const dir = join(root, `dir-${d}`, 'nested');
    mkdirSync(dir, { recursive: true });
    for (let f = 0; f < FILES_PER_DIR; f++) {
      const name = join(dir, `file-${String(f).padStart(3, '0')}.js`);
      // Most match once; every 17th is larger than one read (left open), every 11th binary, every 13th has no match.
      if (f % 13 === 0) writeFileSync(name, 'nothing to see\n');
      else if (f % 11 === 0) writeFileSync(name, Buffer.concat([Buffer.from('createServer()\n'), Buffer.from([0])]));
      else if (f % 17 === 0) writeFileSync(name, `${'filler\n'.repeat(12_000)}createServer(${f})\n`);
      else writeFileSync(name, `// ${d}/${f}\nconst s = createServer(${f});\n`);
    }
  }
  const loaded = loadSearchCalls(root, createLogger('error'));
  if (!loaded) throw new Error('the addon did not load (npm run build)');
  calls = loaded;
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const openFds = () => readdirSync('/proc/self/fd').length;

function request(searchCalls: SearchCalls | undefined, pattern: string, literal: boolean, timeoutMs = 60_000) {
  return prepareSearch({
    root,
    pattern: compilePattern(pattern, literal, 'smart'),
    walk: { hidden: false, gitignore: true, include: [], exclude: [], reader: undefined, searchCalls },
    scan: { context: 1, maxPerFile: Number.POSITIVE_INFINITY, maxFileBytes: 0, bytes: searchCalls },
    maxResults: Number.POSITIVE_INFINITY,
    timeoutMs,
  });
}

async function answer(searchCalls: SearchCalls | undefined, pattern: string, literal: boolean): Promise<unknown[]> {
  let text = '';
  const summary = await request(searchCalls, pattern, literal)({ write: (chunk) => void (text += chunk), waitForRoom: async () => {}, gone: false });
  return [...text.trim().split('\n').map((line) => JSON.parse(line)), { ...summary, elapsed_ms: 0 }];
}

describe('search in batches on the thread pool', () => {
  it('the tree spans many batches', () => {
    expect(DIRS * FILES_PER_DIR).toBeGreaterThan(5 * SEARCH_BATCH_FILES);
  });

  for (const [pattern, literal] of [['createServer', true], ['create\\w+\\((\\d+)\\)', false], ['createserver', false]] as const) {
    it(`answers what the event loop alone answers, in the same order: ${pattern}`, async () => {
      const pooled = await answer(calls, pattern, literal);
      const inline = await answer(undefined, pattern, literal);
      expect(pooled.length).toBeGreaterThan(DIRS * FILES_PER_DIR * 0.7);
      expect(pooled).toEqual(inline);
    });
  }

  it('keeps at most SEARCH_BATCHES_IN_FLIGHT jobs in flight, two or more at once, each with one arena', async () => {
    let inFlight = 0;
    let most = 0;
    const arenas = new Set<Buffer>();
    const counting: SearchCalls = {
      ...calls,
      scanFiles: (...args) => {
        arenas.add(args[7]);
        expect(args[7].length).toBe(SEARCH_BATCH_ARENA_BYTES);
        most = Math.max(most, ++inFlight);
        return calls.scanFiles(...args).finally(() => inFlight--);
      },
    };
    const answered = await answer(counting, 'createServer', true);
    expect(answered.length).toBeGreaterThan(DIRS * FILES_PER_DIR * 0.7);
    expect(most).toBeLessThanOrEqual(SEARCH_BATCHES_IN_FLIGHT);
    expect(most).toBeGreaterThanOrEqual(2);
    // Arenas are reused: the bytes a search holds do not grow with the tree.
    expect(arenas.size).toBeLessThanOrEqual(SEARCH_BATCHES_IN_FLIGHT);
  });

  it('stops soon when its client leaves with batches in flight, and closes every descriptor', async () => {
    const before = openFds();
    let goneAt = 0;
    let writes = 0;
    const sink: SearchSink & { gone: boolean } = {
      gone: false,
      write: () => {
        if (++writes === 1) {
          sink.gone = true;
          goneAt = performance.now();
        }
      },
      waitForRoom: async () => {},
    };
    const summary = await request(calls, 'createServer', true)(sink);
    const stoppedAfter = performance.now() - goneAt;
    expect(sink.gone).toBe(true);
    expect(summary.files_scanned).toBeLessThan(DIRS * FILES_PER_DIR);
    expect(stoppedAfter).toBeLessThan(100);
    expect(openFds()).toBe(before);
  });

  it('stops at its time budget with batches in flight, and closes every descriptor', async () => {
    const before = openFds();
    const summary = await request(calls, 'createserver', false, 1)({ write: () => {}, waitForRoom: async () => {}, gone: false });
    expect(summary.timed_out).toBe(true);
    expect(summary.files_scanned).toBeLessThan(DIRS * FILES_PER_DIR);
    expect(openFds()).toBe(before);
  });
});

describe('a search of one file (path is a regular file)', () => {
  const searchFile = async (path: string, maxFileBytes: number) =>
    prepareSearch({
      root: path,
      pattern: compilePattern('createServer', true, 'smart'),
      walk: { hidden: false, gitignore: true, include: [], exclude: [], reader: undefined, searchCalls: calls },
      scan: { context: 0, maxPerFile: Number.POSITIVE_INFINITY, maxFileBytes, bytes: calls },
      maxResults: Number.POSITIVE_INFINITY,
      timeoutMs: 60_000,
    })({ write: () => {}, waitForRoom: async () => {}, gone: false });

  it('searches it, but not when it is empty (a size-0 pseudo-file may block a read) or over max_file_bytes', async () => {
    const one = join(root, 'one.txt');
    writeFileSync(one, 'createServer()\n');
    writeFileSync(join(root, 'empty.txt'), '');
    expect(await searchFile(one, 0)).toMatchObject({ files_scanned: 1, matches: 1 });
    expect(await searchFile(join(root, 'empty.txt'), 0)).toMatchObject({ files_scanned: 0, matches: 0 });
    expect(await searchFile(one, 4)).toMatchObject({ files_scanned: 0, matches: 0 });
  });
});
