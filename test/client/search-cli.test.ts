import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnvdClient, EnvdError } from '../../src/client/index.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { runEnvd } from '../helpers/archives.js';

let server: TestServer;
let dir: string;

beforeAll(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), 'envd-search-cli-'));
  mkdirSync(join(dir, 'src'));
  writeFileSync(join(dir, 'src/a.ts'), 'one\nconst needle = 1;\nthree\n');
  writeFileSync(join(dir, 'src/b.js'), 'needle\n');
  writeFileSync(join(dir, '.ignore'), 'b.js\n');
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await server.close();
});

function envd(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runEnvd(args, { url: server.url, token: server.token! });
}

describe('envd grep and envd find (dist/envd as a child process)', () => {
  it('grep prints path:line:text with context as path-line-text, exits 0 on a match and 1 without', async () => {
    const r = await envd(['grep', '-C', '1', 'needle', dir]);
    expect(r).toMatchObject({ code: 0, stdout: `${dir}/src/a.ts-1-one\n${dir}/src/a.ts:2:const needle = 1;\n${dir}/src/a.ts-3-three\n` });
    expect((await envd(['grep', 'nothing-here', dir])).code).toBe(1);
    expect((await envd(['grep', '--no-ignore', '-g', '*.js', 'needle', dir])).stdout).toBe(`${dir}/src/b.js:1:needle\n`);
  });

  it('grep --json prints the NDJSON events; a bad pattern is exit 1 with the 400 on stderr', async () => {
    const events = (await envd(['grep', '--json', 'needle', dir])).stdout.trim().split('\n').map((line) => JSON.parse(line));
    expect(events.map((e) => e.type)).toEqual(['match', 'summary']);
    const bad = await envd(['grep', 'a(', dir]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^envd grep: pattern: /);
  });

  it('find prints one path per line; -t dir lists directories', async () => {
    expect(await envd(['find', '**/*.ts', dir])).toMatchObject({ code: 0, stdout: `${dir}/src/a.ts\n` });
    expect((await envd(['find', '-t', 'dir', 'src', dir])).stdout).toBe(`${dir}/src/\n`);
    expect((await envd(['find', '-t', 'nope', 'src', dir])).code).toBe(2);
  });
});

describe('client.search', () => {
  it('streams matches and the summary, finds, reads line ranges and edits', async () => {
    const client = new EnvdClient({ url: server.url, token: server.token });
    const events = [];
    for await (const event of client.search.search({ path: dir, pattern: 'needle' })) events.push(event);
    expect(events).toEqual([expect.objectContaining({ type: 'match', path: join(dir, 'src/a.ts'), line: 2, column: 7 }), expect.objectContaining({ type: 'summary', matches: 1 })]);
    expect((await client.search.find({ path: dir, glob: '*.ts' })).entries.map((e) => e.path)).toEqual([join(dir, 'src/a.ts')]);
    expect(await client.search.readLines(join(dir, 'src/a.ts'), { from_line: 2, lines: 1 })).toMatchObject({ data: 'const needle = 1;\n', total_lines: 3 });
    const edited = await client.search.edit({ path: join(dir, 'src/a.ts'), edits: [{ old: 'needle', new: 'pin' }] });
    expect(edited.replacements).toBe(1);
    expect(readFileSync(join(dir, 'src/a.ts'), 'utf8')).toBe('one\nconst pin = 1;\nthree\n');
    const conflict = await client.search.edit({ path: join(dir, 'src/a.ts'), edits: [{ old: 'needle', new: 'x' }] }).catch((error) => error);
    expect(conflict).toBeInstanceOf(EnvdError);
    expect(conflict.status).toBe(409);
  });
});
