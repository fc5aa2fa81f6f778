import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isTempName } from '../../src/files/atomic-write.js';
import { renameAllOrNone } from '../../src/files/batch.js';
import { openDirectory } from '../../src/files/user-path.js';
import { READ_LIMIT } from '../../src/files/read.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-json-');

const q = (path: string) => `path=${encodeURIComponent(path)}`;
const allTemps = (d: string): string[] => readdirSync(d, { recursive: true, encoding: 'utf8' }).filter((name) => isTempName(name.split('/').pop()!));

describe('POST /files and GET /files', () => {
  it('writes utf8 and base64 and reads them back in either encoding', async () => {
    const target = join(scratch.dir, 'sub/hello.txt');
    expect(await scratch.server.json('POST', '/files', { path: target, data: 'héllo\n' })).toEqual({ status: 200, body: { path: target, size: 7, sha256: createHash('sha256').update('héllo\n').digest('hex') } });
    expect((await scratch.server.json('GET', `/files?${q(target)}`)).body).toEqual({ path: target, data: 'héllo\n', encoding: 'utf8', size: 7 });
    expect((await scratch.server.json('GET', `/files?${q(target)}&encoding=base64`)).body.data).toBe(Buffer.from('héllo\n').toString('base64'));
    const binary = join(scratch.dir, 'bin');
    await scratch.server.json('POST', '/files', { path: binary, data: Buffer.from([0, 255, 1]).toString('base64'), encoding: 'base64' });
    expect([...readFileSync(binary)]).toEqual([0, 255, 1]);
  });

  it('refuses base64 that does not decode with 400', async () => {
    const { status, body } = await scratch.server.json('POST', '/files', { path: join(scratch.dir, 'x'), data: 'not base64!', encoding: 'base64' });
    expect(status).toBe(400);
    expect(body.message).toMatch(/data: not valid base64/);
  });

  it('reads a file of exactly 10 MiB and refuses one byte more with 413', async () => {
    const edge = join(scratch.dir, 'edge');
    writeFileSync(edge, Buffer.alloc(READ_LIMIT, 'a'));
    const ok = await scratch.server.json('GET', `/files?${q(edge)}`);
    expect(ok.status).toBe(200);
    expect(ok.body.size).toBe(READ_LIMIT);
    writeFileSync(edge, Buffer.alloc(READ_LIMIT + 1, 'a'));
    const over = await scratch.server.json('GET', `/files?${q(edge)}`);
    expect(over.status).toBe(413);
    expect(over.body.message).toMatch(/\/files\/raw/);
  });

  it('answers a missing file with 404 and a directory with 400', async () => {
    expect((await scratch.server.json('GET', `/files?${q(join(scratch.dir, 'none'))}`)).status).toBe(404);
    expect((await scratch.server.json('GET', `/files?${q(scratch.dir)}`)).status).toBe(400);
    expect((await scratch.server.json('POST', '/files', { path: scratch.dir, data: 'x' })).status).toBe(400);
  });

  it('reads a file whose size says 0 to its end (/proc), and refuses a FIFO with 400 instead of hanging', async () => {
    const { status, body } = await scratch.server.json('GET', `/files?path=/proc/self/status`);
    expect(status).toBe(200);
    expect(body.data).toMatch(/^Name:.*\n[\s\S]*VmRSS:/);
    expect(body.size).toBe(Buffer.byteLength(body.data));
    const fifo = join(scratch.dir, 'pipe');
    execFileSync('mkfifo', [fifo]);
    const answer = await scratch.server.json('GET', `/files?path=${fifo}`);
    expect(answer.status).toBe(400);
    expect(answer.body.message).toMatch(/FIFO/);
  });

  it('refuses a JSON body over 10 MiB with 413', async () => {
    const { status } = await scratch.server.json('POST', '/files', { path: join(scratch.dir, 'big'), data: 'a'.repeat(10 * 1024 * 1024) });
    expect(status).toBe(413);
    expect(readdirSync(scratch.dir)).toEqual([]);
  });
});

describe('GET /files of a file the kernel will not read', () => {
  it('answers /proc/self/mem (EIO) with a 400 that says so, not a 500', async () => {
    const { status, body } = await scratch.server.json('GET', `/files?${q('/proc/self/mem')}`);
    expect(status).toBe(400);
    expect(body).toEqual({ message: '/proc/self/mem: cannot be read (EIO)' });
  });
});

describe('POST /files/batch', () => {
  it('writes every file and answers their sizes; an empty batch answers an empty list', async () => {
    const a = join(scratch.dir, 'a.txt');
    const b = join(scratch.dir, 'deep/b.bin');
    const { status, body } = await scratch.server.json('POST', '/files/batch', { files: [{ path: a, data: 'AAA' }, { path: b, data: 'AAEC', encoding: 'base64' }] });
    expect(status).toBe(200);
    const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
    expect(body).toEqual({ files: [{ path: a, size: 3, sha256: sha(Buffer.from('AAA')) }, { path: b, size: 3, sha256: sha(Buffer.from([0, 1, 2])) }] });
    expect(readFileSync(a, 'utf8')).toBe('AAA');
    expect([...readFileSync(b)]).toEqual([0, 1, 2]);
    expect(await scratch.server.json('POST', '/files/batch', { files: [] })).toEqual({ status: 200, body: { files: [] } });
  });

  it('refuses duplicate paths (after normalising) with 400 and writes nothing', async () => {
    const a = join(scratch.dir, 'a.txt');
    const { status, body } = await scratch.server.json('POST', '/files/batch', { files: [{ path: a, data: '1' }, { path: `${scratch.dir}/./x/../a.txt`, data: '2' }] });
    expect(status).toBe(400);
    expect(body.message).toMatch(/files\[1\]\.path: .* more than once/);
    expect(readdirSync(scratch.dir)).toEqual([]);
  });

  it('changes no target when a later entry fails, and leaves no temp file', async () => {
    const first = join(scratch.dir, 'first.txt');
    writeFileSync(first, 'old');
    writeFileSync(join(scratch.dir, 'file'), 'a file, not a directory');
    const response = await scratch.server.json('POST', '/files/batch', {
      files: [{ path: first, data: 'new' }, { path: join(scratch.dir, 'file/child.txt'), data: 'x' }],
    });
    expect(response.status).toBe(400);
    expect(response.body.message).toMatch(/not a directory/);
    expect(readFileSync(first, 'utf8')).toBe('old');
    expect(allTemps(scratch.dir)).toEqual([]);
  });

  it('refuses a batch whose target is an existing directory, changing nothing', async () => {
    const first = join(scratch.dir, 'first.txt');
    writeFileSync(first, 'old');
    const response = await scratch.server.json('POST', '/files/batch', { files: [{ path: first, data: 'new' }, { path: scratch.dir, data: 'x' }] });
    expect(response.status).toBe(400);
    expect(readFileSync(first, 'utf8')).toBe('old');
  });

  it('refuses relative and NUL paths naming the entry', async () => {
    for (const path of ['rel.txt', `${scratch.dir}/a\0b`]) {
      const { status, body } = await scratch.server.json('POST', '/files/batch', { files: [{ path: join(scratch.dir, 'ok'), data: '' }, { path, data: '' }] });
      expect(status).toBe(400);
      expect(body.message).toMatch(/^files\[1\]\.path: must/);
    }
  });
});

describe('renameAllOrNone (the batch commit step)', () => {
  it('puts back every replaced target and removes every new one when a rename in the middle fails', async () => {
    const existing = join(scratch.dir, 'existing.txt');
    const fresh = join(scratch.dir, 'fresh.txt');
    const third = join(scratch.dir, 'third.txt');
    writeFileSync(existing, 'old');
    const inodeBefore = statSync(existing).ino;
    const { dir } = await openDirectory(scratch.dir);
    const stage = (name: string, text: string) => {
      const temp = `.${name}.envd-${randomBytes(6).toString('hex')}.tmp`;
      writeFileSync(join(scratch.dir, temp), text);
      return { dir, name, temp, ino: statSync(join(scratch.dir, temp)).ino, size: text.length };
    };
    const staged = [
      { target: existing, ...stage('existing.txt', 'new') },
      { target: fresh, ...stage('fresh.txt', 'new') },
      // Its temp file is gone (removed by someone else): the third rename fails after two have succeeded.
      { target: third, dir, name: 'third.txt', temp: '.third.txt.envd-ffffffffffff.tmp', ino: 1, size: 3 },
    ];
    await expect(renameAllOrNone(staged)).rejects.toMatchObject({ status: 409 });
    await dir.close();
    expect(readFileSync(existing, 'utf8')).toBe('old');
    expect(statSync(existing).ino).toBe(inodeBefore);
    expect(readdirSync(scratch.dir).sort()).toEqual(['existing.txt']);
  });
});
