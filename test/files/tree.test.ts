import { lstatSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_LIST_DEPTH } from '../../src/files/schemas.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-tree-');

const q = (path: string) => `path=${encodeURIComponent(path)}`;

describe('exists, info and list', () => {
  it('says a file, a directory and a dangling symlink exist, and a missing path does not', async () => {
    writeFileSync(join(scratch.dir, 'f'), 'x');
    symlinkSync(join(scratch.dir, 'nowhere'), join(scratch.dir, 'dangling'));
    for (const [name, exists] of [['f', true], ['', true], ['dangling', true], ['nope', false], ['f/under-a-file', false]] as const) {
      expect((await scratch.server.json('GET', `/files/exists?${q(join(scratch.dir, name))}`)).body, name).toEqual({ exists });
    }
  });

  it('describes a file with mode, permissions, owner, group and an ISO time', async () => {
    const file = join(scratch.dir, 'f.txt');
    writeFileSync(file, 'hello', { mode: 0o640 });
    const { status, body } = await scratch.server.json('GET', `/files/info?${q(file)}`);
    expect(status).toBe(200);
    expect(body).toEqual({
      name: 'f.txt',
      path: file,
      type: 'file',
      size: 5,
      mode: 0o640,
      permissions: '-rw-r-----',
      owner: expect.any(String),
      group: expect.any(String),
      modified_at: statSync(file).mtime.toISOString(),
    });
    if (process.getuid?.() === 0) expect([body.owner, body.group]).toEqual(['root', 'root']);
    const directory = (await scratch.server.json('GET', `/files/info?${q(scratch.dir)}`)).body;
    expect(directory).toMatchObject({ type: 'dir', size: 0, permissions: expect.stringMatching(/^d/) });
  });

  it('describes a dangling symlink without following it, and 404s a missing path', async () => {
    const link = join(scratch.dir, 'dangling');
    symlinkSync('/no/such/target', link);
    const { status, body } = await scratch.server.json('GET', `/files/info?${q(link)}`);
    expect(status).toBe(200);
    expect(body).toMatchObject({ name: 'dangling', type: 'symlink', symlink_target: '/no/such/target', permissions: expect.stringMatching(/^l/) });
    expect((await scratch.server.json('GET', `/files/info?${q(join(scratch.dir, 'nope'))}`)).status).toBe(404);
  });

  it('lists down to the requested depth, sorted by path, without following symlinked directories', async () => {
    mkdirSync(join(scratch.dir, 'a/b/c'), { recursive: true });
    writeFileSync(join(scratch.dir, 'a/b/c/deep.txt'), 'x');
    writeFileSync(join(scratch.dir, 'a/one.txt'), 'x');
    writeFileSync(join(scratch.dir, 'z.txt'), 'x');
    symlinkSync(join(scratch.dir, 'a'), join(scratch.dir, 'link-to-a'));
    symlinkSync('/nowhere', join(scratch.dir, 'dangling'));
    const paths = async (depth?: number) => {
      const { status, body } = await scratch.server.json('GET', `/files/list?${q(scratch.dir)}${depth ? `&depth=${depth}` : ''}`);
      expect(status).toBe(200);
      return body.entries.map((e: { path: string }) => e.path.slice(scratch.dir.length + 1));
    };
    expect(await paths()).toEqual(['a', 'dangling', 'link-to-a', 'z.txt']);
    expect(await paths(2)).toEqual(['a', 'a/b', 'a/one.txt', 'dangling', 'link-to-a', 'z.txt']);
    expect(await paths(3)).toEqual(['a', 'a/b', 'a/b/c', 'a/one.txt', 'dangling', 'link-to-a', 'z.txt']);
    expect(await paths(4)).toContain('a/b/c/deep.txt');
    const entries = (await scratch.server.json('GET', `/files/list?${q(scratch.dir)}`)).body.entries;
    expect(entries.find((e: { name: string }) => e.name === 'link-to-a')).toMatchObject({ type: 'symlink', symlink_target: join(scratch.dir, 'a') });
  });

  it('refuses a depth below 1, above the maximum or not an integer with 400; 404 missing; 400 a file', async () => {
    for (const depth of ['0', String(MAX_LIST_DEPTH + 1), '1.5', 'x']) {
      const { status, body } = await scratch.server.json('GET', `/files/list?${q(scratch.dir)}&depth=${depth}`);
      expect(status, depth).toBe(400);
      expect(body.message).toMatch(/depth/);
    }
    expect((await scratch.server.json('GET', `/files/list?${q(scratch.dir)}&depth=${MAX_LIST_DEPTH}`)).status).toBe(200);
    expect((await scratch.server.json('GET', `/files/list?${q(join(scratch.dir, 'nope'))}`)).status).toBe(404);
    writeFileSync(join(scratch.dir, 'f'), 'x');
    expect((await scratch.server.json('GET', `/files/list?${q(join(scratch.dir, 'f'))}`)).status).toBe(400);
  });
});

describe('rename, mkdir and delete', () => {
  it('renames into a new parent and answers the entry info of the destination', async () => {
    writeFileSync(join(scratch.dir, 'from.txt'), 'data');
    const to = join(scratch.dir, 'new/parent/to.txt');
    const { status, body } = await scratch.server.json('POST', '/files/rename', { from: join(scratch.dir, 'from.txt'), to });
    expect(status).toBe(200);
    expect(body).toMatchObject({ name: 'to.txt', path: to, type: 'file', size: 4 });
    expect(readFileSync(to, 'utf8')).toBe('data');
    const missing = await scratch.server.json('POST', '/files/rename', { from: join(scratch.dir, 'gone'), to: join(scratch.dir, 'x') });
    expect(missing.status).toBe(404);
    expect(missing.body.message).toContain(join(scratch.dir, 'gone'));
  });

  it('makes a directory with its parents: created true, then false, and 409 over a file', async () => {
    const path = join(scratch.dir, 'x/y/z');
    expect(await scratch.server.json('POST', '/files/mkdir', { path })).toEqual({ status: 200, body: { path, created: true } });
    expect(lstatSync(path).isDirectory()).toBe(true);
    expect(await scratch.server.json('POST', '/files/mkdir', { path })).toEqual({ status: 200, body: { path, created: false } });
    writeFileSync(join(scratch.dir, 'file'), 'x');
    const over = await scratch.server.json('POST', '/files/mkdir', { path: join(scratch.dir, 'file') });
    expect(over.status).toBe(409);
    expect(over.body.message).toMatch(/not a directory/);
    expect((await scratch.server.json('POST', '/files/mkdir', { path: join(scratch.dir, 'file/sub') })).status).toBe(400);
  });

  it('removes a whole tree, a symlink without its target, and says false when nothing is there', async () => {
    mkdirSync(join(scratch.dir, 'tree/a/b'), { recursive: true });
    writeFileSync(join(scratch.dir, 'tree/a/b/f'), 'x');
    writeFileSync(join(scratch.dir, 'kept'), 'x');
    symlinkSync(join(scratch.dir, 'kept'), join(scratch.dir, 'link'));
    expect((await scratch.server.json('DELETE', `/files?${q(join(scratch.dir, 'tree'))}`)).body).toEqual({ removed: true });
    expect((await scratch.server.json('DELETE', `/files?${q(join(scratch.dir, 'link'))}`)).body).toEqual({ removed: true });
    expect(readFileSync(join(scratch.dir, 'kept'), 'utf8')).toBe('x');
    expect((await scratch.server.json('GET', `/files/exists?${q(join(scratch.dir, 'tree'))}`)).body).toEqual({ exists: false });
    expect((await scratch.server.json('DELETE', `/files?${q(join(scratch.dir, 'tree'))}`)).body).toEqual({ removed: false });
  });

  it('refuses to remove /', async () => {
    for (const path of ['/', '/tmp/..', '//']) {
      const { status, body } = await scratch.server.json('DELETE', `/files?${q(path)}`);
      expect(status).toBe(400);
      expect(body.message).toMatch(/refusing to remove \//);
    }
  });
});

describe('path rules on every route', () => {
  const routes: [string, string, (path: string) => { query?: string; body?: unknown }][] = [
    ['GET', '/files', (p) => ({ query: q(p) })],
    ['POST', '/files', (p) => ({ body: { path: p, data: '' } })],
    ['DELETE', '/files', (p) => ({ query: q(p) })],
    ['GET', '/files/raw', (p) => ({ query: q(p) })],
    ['GET', '/files/exists', (p) => ({ query: q(p) })],
    ['GET', '/files/info', (p) => ({ query: q(p) })],
    ['GET', '/files/list', (p) => ({ query: q(p) })],
    ['POST', '/files/rename', (p) => ({ body: { from: p, to: '/tmp/x' } })],
    ['POST', '/files/rename', (p) => ({ body: { from: '/tmp/x', to: p } })],
    ['POST', '/files/mkdir', (p) => ({ body: { path: p } })],
    ['POST', '/files/batch', (p) => ({ body: { files: [{ path: p, data: '' }] } })],
    ['POST', '/files/watch', (p) => ({ body: { path: p } })],
  ];
  for (const [method, route, make] of routes) {
    it(`${method} ${route} refuses a relative path and a NUL byte with 400 naming the field`, async () => {
      for (const bad of ['relative/path', '/tmp/a\0b']) {
        const { query, body } = make(bad);
        const { status, body: answer } = await scratch.server.json(method, query ? `${route}?${query}` : route, body);
        expect(status, bad).toBe(400);
        expect(answer.message).toMatch(/^(path|from|to|files\[0\]\.path): must/);
      }
    });
  }

  it('refuses a missing path field with 400 naming it', async () => {
    const { status, body } = await scratch.server.json('GET', '/files/info');
    expect(status).toBe(400);
    expect(body.message).toMatch(/path/);
  });
});
