import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type TestServer } from '../helpers/server.js';

// ripgrep is the oracle: for each request, envd's matching files and lines must be rg's.
const hasRg = spawnSync('rg', ['--version']).status === 0;
if (!hasRg) console.warn('SKIPPING search oracle tests: ripgrep (rg) is not installed (.ci/run installs it)');

let server: TestServer;
let tree: string;
let home: string;

/** A small real tree: a git checkout with nested ignore files, hidden, binary and non-UTF-8 entries, and a node_modules. */
function makeTree(root: string): void {
  const put = (rel: string, text: string | Buffer) => {
    mkdirSync(join(root, rel, '..'), { recursive: true });
    writeFileSync(join(root, rel), text);
  };
  execFileSync('git', ['init', '-q', root]);
  put('.gitignore', 'build/\n*.log\n!keep.log\n/only-top.txt\n');
  put('.git/info/exclude', 'excluded-by-info.txt\n');
  put('src/app.js', 'const needle = 1;\nfunction fooBar() { return "Hello World"; }\n// needle again, needle twice\nfoobaz\n');
  put('src/lib/util.ts', 'export const Needle = 2;\nexport function foobar() {}\n\tindented needle\n');
  put('src/lib/.gitignore', 'generated.ts\n');
  put('src/lib/generated.ts', 'needle generated\n');
  put('src/.ignore', 'secret.txt\n');
  put('src/secret.txt', 'needle secret\n');
  put('build/out.js', 'needle built\n');
  put('debug.log', 'needle log\n');
  put('keep.log', 'needle kept log\n');
  put('only-top.txt', 'needle top\n');
  put('nested/only-top.txt', 'needle nested top\n');
  put('excluded-by-info.txt', 'needle info\n');
  put('.hidden.txt', 'needle hidden\n');
  put('.config/settings.json', '{"needle": true}\n');
  put('binary.bin', Buffer.concat([Buffer.from('needle\0binary\n'), Buffer.from('needle\n')]));
  writeFileSync(Buffer.concat([Buffer.from(join(root, 'nested') + '/'), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x2e, 0x74, 0x78, 0x74])]), 'needle in a latin-1 name\n');
  put('unicode/ünï.txt', 'ÜNÏCODE needle ünï\nstraße needle\n');
  put('crlf.txt', 'needle crlf\r\nother\r\n');
  put('no-newline.txt', 'last line needle');
  put('node_modules/pkg/index.js', 'module.exports = "needle";\n');
  put('node_modules/pkg/.gitignore', '*.map\n');
  put('node_modules/pkg/index.js.map', 'needle map\n');
  put('node_modules/pkg/README.md', 'Needle docs\nneedle lower\n');
  put('space name/file with spaces.txt', 'needle spaced\n');
  put('empty.txt', '');
  put('regex.txt', 'aaa bbb\nfoo123bar\nfoo bar\nstart middle end\n');
}

beforeAll(async () => {
  tree = mkdtempSync(join(tmpdir(), 'envd-search-oracle-'));
  home = mkdtempSync(join(tmpdir(), 'envd-search-home-'));
  makeTree(tree);
  server = await startServer();
});
afterAll(async () => {
  await server?.close();
  rmSync(tree, { recursive: true, force: true });
  rmSync(home, { recursive: true, force: true });
});

interface Line {
  path: string;
  line: number;
  column: number;
}

const pathOf = (path: { text?: string; bytes?: string }) => path.text ?? `base64:${path.bytes}`;

/** rg --json's matching lines, as path:line:column (column of the first match, 1-based bytes). */
function rgLines(args: string[]): string[] {
  // A home without a global gitignore, no config file: rg's defaults only, but smart case (-S), envd's default;
  // in the tree, because rg's -g globs are relative to its working directory.
  const run = spawnSync('rg', ['--json', '-S', ...args, tree], { cwd: tree, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: home } });
  if (run.status !== 0 && run.status !== 1) throw new Error(`rg failed: ${run.stderr}`);
  return run.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line))
    .filter((event) => event.type === 'match')
    .map((event) => `${pathOf(event.data.path)}:${event.data.line_number}:${event.data.submatches[0].start + 1}`)
    .sort();
}

async function envdLines(body: Record<string, unknown>): Promise<{ lines: string[]; summary: any; matches: any[] }> {
  const response = await server.call('POST', '/files/search', { path: tree, ...body });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/application\/x-ndjson/);
  const events = (await response.text()).split('\n').filter(Boolean).map((line) => JSON.parse(line));
  const summary = events.at(-1);
  expect(summary.type).toBe('summary');
  const matches = events.slice(0, -1);
  const lines = matches.map((m) => `${m.path_base64 ? `base64:${m.path_base64}` : m.path}:${m.line}:${m.column}`).sort();
  return { lines, summary, matches };
}

const cases: { name: string; body: Record<string, unknown>; rg: string[] }[] = [
  { name: 'a literal, smart case (lower case: insensitive)', body: { pattern: 'needle', literal: true }, rg: ['-F', 'needle'] },
  { name: 'a literal with an upper-case letter (smart case: sensitive)', body: { pattern: 'Needle', literal: true }, rg: ['-F', 'Needle'] },
  { name: 'a case-sensitive literal', body: { pattern: 'needle', literal: true, case: 'sensitive' }, rg: ['-s', '-F', 'needle'] },
  { name: 'a regex', body: { pattern: 'fo+ba[rz]' }, rg: ['fo+ba[rz]'] },
  { name: 'a regex with classes and anchors', body: { pattern: '^foo\\d+bar$' }, rg: ['^foo\\d+bar$'] },
  { name: 'a regex whose \\s could span lines', body: { pattern: 'bbb\\s+foo' }, rg: ['bbb\\s+foo'] },
  { name: 'a case-insensitive regex', body: { pattern: 'hello world', case: 'insensitive' }, rg: ['-i', 'hello world'] },
  { name: 'non-ASCII text, smart case', body: { pattern: 'ünï', literal: true }, rg: ['-F', 'ünï'] },
  { name: 'include globs', body: { pattern: 'needle', include: ['*.js', '*.ts'] }, rg: ['-g', '*.js', '-g', '*.ts', 'needle'] },
  { name: 'an exclude glob', body: { pattern: 'needle', exclude: ['src/**'] }, rg: ['-g', '!src/**', 'needle'] },
  { name: 'include and exclude', body: { pattern: 'needle', include: ['**/*.txt'], exclude: ['nested'] }, rg: ['-g', '**/*.txt', '-g', '!nested', 'needle'] },
  { name: 'hidden files', body: { pattern: 'needle', hidden: true }, rg: ['--hidden', 'needle'] },
  { name: 'ignore files off', body: { pattern: 'needle', gitignore: false }, rg: ['--no-ignore', 'needle'] },
  { name: 'an empty pattern (every line)', body: { pattern: '' }, rg: [''] },
];

describe.skipIf(!hasRg)('POST /files/search equals ripgrep', () => {
  for (const { name, body, rg } of cases) {
    it(`finds the lines rg finds: ${name}`, async () => {
      const expected = rgLines(rg);
      const { lines, summary } = await envdLines(body);
      expect(lines).toEqual(expected);
      expect(summary.matches).toBe(expected.length);
      expect(summary.files_matched).toBe(new Set(expected.map((line) => line.replace(/:\d+:\d+$/, ''))).size);
    });
  }

  it('the tree exercises every rule: ignored, hidden and binary files are really there and left out', async () => {
    const { lines } = await envdLines({ pattern: 'needle', literal: true });
    const all = lines.join('\n');
    for (const left of ['build/out.js', 'debug.log', 'generated.ts', 'secret.txt', `${tree}/only-top.txt`, 'excluded-by-info', '.hidden', 'binary.bin', 'index.js.map']) expect(all).not.toContain(left);
    for (const kept of ['keep.log', 'nested/only-top.txt', 'crlf.txt', 'no-newline.txt', 'file with spaces', 'node_modules/pkg/index.js', 'base64:']) expect(all).toContain(kept);
  });

  it('answers the text of each line and its context', async () => {
    const { matches } = await envdLines({ pattern: 'foo123bar', context: 1 });
    expect(matches).toEqual([{ type: 'match', path: join(tree, 'regex.txt'), line: 2, column: 1, text: 'foo123bar', before: ['aaa bbb'], after: ['foo bar'] }]);
  });
});

/** rg --files's list (with -g globs), as base64 of each path's bytes. */
function rgFiles(args: string[]): string[] {
  const run = spawnSync('rg', ['--files', ...args, tree], { cwd: tree, env: { PATH: process.env.PATH, HOME: home } });
  const out = run.stdout as Buffer;
  const paths: string[] = [];
  for (let start = 0; start < out.length; ) {
    const end = out.indexOf(10, start);
    paths.push(out.subarray(start, end).toString('base64'));
    start = end + 1;
  }
  return paths.sort();
}

async function envdFiles(query: string): Promise<{ paths: string[]; body: any }> {
  const response = await server.call('GET', `/files/find?path=${encodeURIComponent(tree)}&${query}`);
  expect(response.status).toBe(200);
  const body = await response.json();
  return { paths: body.entries.map((entry: any) => entry.path_base64 ?? Buffer.from(entry.path).toString('base64')).sort(), body };
}

describe.skipIf(!hasRg)('GET /files/find equals rg --files -g', () => {
  for (const glob of [undefined, '*.js', '**/*.txt', 'src/**', '!*.txt', 'node_modules/**/*.js', '*.{js,ts}', '[a-c]*']) {
    it(`lists the files rg lists: ${glob ?? 'no glob'}`, async () => {
      const expected = rgFiles(glob === undefined ? [] : ['-g', glob]);
      const { paths, body } = await envdFiles(glob === undefined ? '' : `glob=${encodeURIComponent(glob)}`);
      expect(paths).toEqual(expected);
      expect(body.truncated).toBe(false);
    });
  }

  it('lists hidden and ignored files when asked, as rg --hidden --no-ignore', async () => {
    expect((await envdFiles('hidden=true&gitignore=false')).paths).toEqual(rgFiles(['--hidden', '--no-ignore']));
  });

  it('answers entry infos, directories with type=dir, and truncates at max_results', async () => {
    const { body } = await envdFiles('glob=src&type=dir');
    expect(body.entries).toEqual([expect.objectContaining({ name: 'src', path: join(tree, 'src'), type: 'dir' })]);
    const file = (await envdFiles('glob=app.js')).body.entries[0];
    expect(file).toMatchObject({ name: 'app.js', path: join(tree, 'src/app.js'), type: 'file', permissions: '-rw-r--r--' });
    expect(file.size).toBeGreaterThan(0);
    // Each entry info is what /files/info answers for the same path (find's lstat goes through the addon's statAt).
    for (const entry of (await envdFiles('glob=**/*.js&type=any')).body.entries.slice(0, 5)) {
      const info = await server.call('GET', `/files/info?path=${encodeURIComponent(entry.path)}`);
      expect(entry).toEqual(await info.json());
    }
    const capped = (await envdFiles('max_results=2')).body;
    expect(capped.entries).toHaveLength(2);
    expect(capped.truncated).toBe(true);
  });
});
