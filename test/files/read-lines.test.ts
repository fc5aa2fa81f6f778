import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { READ_LIMIT } from '../../src/files/read.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-lines-');
const read = (path: string, query: string) => scratch.server.json('GET', `/files?path=${encodeURIComponent(path)}&${query}`);

describe('GET /files with from_line and lines', () => {
  it('answers the lines asked for, with from_line, lines and total_lines', async () => {
    const path = join(scratch.dir, 'f.txt');
    writeFileSync(path, 'one\ntwo\nthree\nfour\n');
    expect((await read(path, 'from_line=2&lines=2')).body).toEqual({ path, data: 'two\nthree\n', encoding: 'utf8', size: 19, from_line: 2, lines: 2, total_lines: 4 });
    expect((await read(path, 'from_line=3')).body).toMatchObject({ data: 'three\nfour\n', lines: 2, total_lines: 4 });
    expect((await read(path, 'lines=1')).body).toMatchObject({ data: 'one\n', from_line: 1, lines: 1 });
    expect((await read(path, 'from_line=9&lines=2')).body).toMatchObject({ data: '', from_line: 9, lines: 0, total_lines: 4 });
    expect((await read(path, 'from_line=2&lines=1&encoding=base64')).body.data).toBe(Buffer.from('two\n').toString('base64'));
  });

  it('counts a last line without a newline, and an empty file as none', async () => {
    const path = join(scratch.dir, 'g.txt');
    writeFileSync(path, 'a\nb');
    expect((await read(path, 'from_line=2')).body).toMatchObject({ data: 'b', lines: 1, total_lines: 2 });
    writeFileSync(path, '');
    expect((await read(path, 'from_line=1')).body).toMatchObject({ data: '', lines: 0, total_lines: 0 });
  });

  it('reads lines of a file larger than the whole-file limit, and refuses a range over it with 413', async () => {
    const path = join(scratch.dir, 'big.txt');
    const line = `${'x'.repeat(1023)}\n`;
    const count = READ_LIMIT / 1024 + 100;
    writeFileSync(path, line.repeat(count));
    expect((await scratch.server.json('GET', `/files?path=${encodeURIComponent(path)}`)).status).toBe(413);
    const tail = await read(path, `from_line=${count}`);
    expect(tail.body).toMatchObject({ data: line, lines: 1, total_lines: count });
    expect((await read(path, `lines=${READ_LIMIT / 1024}`)).status).toBe(200);
    expect((await read(path, `lines=${READ_LIMIT / 1024 + 1}`)).status).toBe(413);
  });

  it('refuses from_line 0 and lines 0 with 400', async () => {
    const path = join(scratch.dir, 'h.txt');
    writeFileSync(path, 'a\n');
    expect((await read(path, 'from_line=0')).status).toBe(400);
    expect((await read(path, 'lines=0')).status).toBe(400);
  });
});
