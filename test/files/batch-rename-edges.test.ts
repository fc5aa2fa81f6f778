// Issue 37, item 5: requests that cannot be carried out are 400 with nothing changed, never a 403
// with an empty directory left behind, nor a 500.
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-edges-');

describe('POST /files/batch with one entry inside another', () => {
  it.each([
    ['the file first', (d: string) => [join(d, 'a'), join(d, 'a/b')]],
    ['the inner file first', (d: string) => [join(d, 'a/b'), join(d, 'a')]],
    ['two levels apart', (d: string) => [join(d, 'new/a'), join(d, 'new/a/x/y/b')]],
  ])('answers 400 naming both, and writes nothing, not even a directory (%s)', async (_, paths) => {
    const [first, second] = paths(scratch.dir);
    const { status, body } = await scratch.server.json('POST', '/files/batch', { files: [{ path: first, data: '1' }, { path: second, data: '2' }] });
    expect(status).toBe(400);
    expect(body.message).toMatch(/^files\[\d\]\.path: .* is inside files\[\d\]\.path /);
    expect(readdirSync(scratch.dir)).toEqual([]);
  });

  it('still writes siblings and unrelated prefixes (a/b beside ab)', async () => {
    const files = [join(scratch.dir, 'ab'), join(scratch.dir, 'a/b'), join(scratch.dir, 'a/c')].map((path) => ({ path, data: 'x' }));
    expect((await scratch.server.json('POST', '/files/batch', { files })).status).toBe(200);
    expect(statSync(join(scratch.dir, 'a')).isDirectory()).toBe(true);
  });
});

describe('POST /files/rename of /', () => {
  it.each([
    ['from /', (d: string) => ({ from: '/', to: join(d, 'root') }), /^from: \/ cannot be moved/],
    ['from /.. (the root by another spelling)', (d: string) => ({ from: '/..', to: join(d, 'root') }), /^from: \/ cannot be moved/],
    ['to /', (d: string) => ({ from: join(d, 'file'), to: '/' }), /^to: \/ cannot be replaced/],
    ['to /.', (d: string) => ({ from: join(d, 'file'), to: '/.' }), /^to: \/ cannot be replaced/],
  ])('answers 400, not 500 EBUSY (%s)', async (_, body, message) => {
    writeFileSync(join(scratch.dir, 'file'), 'kept');
    const answer = await scratch.server.json('POST', '/files/rename', body(scratch.dir));
    expect(answer.status).toBe(400);
    expect(answer.body.message).toMatch(message);
    expect(existsSync(join(scratch.dir, 'file'))).toBe(true);
    expect(existsSync(join(scratch.dir, 'root'))).toBe(false);
  });
});
