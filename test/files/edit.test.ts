import { createHash } from 'node:crypto';
import { chmodSync, chownSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isTempName } from '../../src/files/atomic-write.js';
import { MAX_DIFF_BYTES } from '../../src/files/edit.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-edit-');
const sha = (bytes: string | Buffer) => createHash('sha256').update(bytes).digest('hex');
const edit = (body: Record<string, unknown>) => scratch.server.json('POST', '/files/edit', body);

describe('POST /files/edit', () => {
  it('applies edits in order, each to the previous result, and answers the new hash, count and a unified diff', async () => {
    const path = join(scratch.dir, 'a.ts');
    writeFileSync(path, 'const a = 1;\nconst b = a;\nconsole.log(a, b);\n');
    const { status, body } = await edit({ path, edits: [{ old: 'a', new: 'alpha', count: 3 }, { old: 'const b', new: 'let b' }] });
    expect(status).toBe(200);
    const after = 'const alpha = 1;\nlet b = alpha;\nconsole.log(alpha, b);\n';
    expect(readFileSync(path, 'utf8')).toBe(after);
    expect(body).toMatchObject({ path, size: Buffer.byteLength(after), sha256: sha(after), replacements: 4, diff_truncated: false });
    expect(body.diff).toMatch(/^--- .*a\.ts\n\+\+\+ .*a\.ts\n/);
    expect(body.diff).toContain('-const a = 1;\n');
    expect(body.diff).toContain('+const alpha = 1;\n');
    expect(body.diff).toContain('+let b = alpha;');
    expect(body.diff).toMatch(/^@@ -1,3 \+1,3 @@$/m);
  });

  it('answers 409 naming the edit, how often old was found and where, and leaves the file byte-identical', async () => {
    const path = join(scratch.dir, 'b.txt');
    const original = Buffer.from('one\ntwo\none\nthree\xff\n', 'latin1');
    writeFileSync(path, original);
    const before = statSync(path);
    const many = await edit({ path, edits: [{ old: 'two', new: '2' }, { old: 'one', new: '1' }] });
    expect(many.status).toBe(409);
    expect(many.body.message).toMatch(/edits\[1\]: old was found 2 times, expected 1, at lines 1, 3/);
    const none = await edit({ path, edits: [{ old: 'four', new: '4' }] });
    expect(none.status).toBe(409);
    expect(none.body.message).toMatch(/edits\[0\]: old was found 0 times, expected 1/);
    const stale = await edit({ path, edits: [{ old: 'two', new: '2' }], expect_sha256: sha('something else') });
    expect(stale.status).toBe(409);
    expect(stale.body.message).toContain(sha(original));
    expect(readFileSync(path).equals(original)).toBe(true);
    expect(statSync(path).ino).toBe(before.ino);
    expect(readdirSync(scratch.dir).filter(isTempName)).toEqual([]);
  });

  it('accepts the current hash, and count > 1', async () => {
    const path = join(scratch.dir, 'c.txt');
    writeFileSync(path, 'x x x\n');
    const { status, body } = await edit({ path, edits: [{ old: 'x', new: 'y', count: 3 }], expect_sha256: sha('x x x\n') });
    expect(status).toBe(200);
    expect(body.replacements).toBe(3);
    expect(readFileSync(path, 'utf8')).toBe('y y y\n');
  });

  it('keeps the mode and the owner of the file it replaces', async () => {
    const path = join(scratch.dir, 'run.sh');
    writeFileSync(path, '#!/bin/sh\necho old\n');
    chmodSync(path, 0o750);
    if (process.getuid?.() === 0) chownSync(path, 1234, 4321);
    expect((await edit({ path, edits: [{ old: 'old', new: 'new' }] })).status).toBe(200);
    const stats = statSync(path);
    expect(stats.mode & 0o7777).toBe(0o750);
    if (process.getuid?.() === 0) expect([stats.uid, stats.gid]).toEqual([1234, 4321]);
  });

  it('refuses a symlink, a directory and a missing file without touching anything', async () => {
    const target = join(scratch.dir, 'target');
    writeFileSync(target, 'keep');
    symlinkSync(target, join(scratch.dir, 'link'));
    expect((await edit({ path: join(scratch.dir, 'link'), edits: [{ old: 'keep', new: 'x' }] })).status).toBe(400);
    expect((await edit({ path: scratch.dir, edits: [{ old: 'keep', new: 'x' }] })).status).toBe(400);
    expect((await edit({ path: join(scratch.dir, 'none'), edits: [{ old: 'keep', new: 'x' }] })).status).toBe(404);
    expect((await edit({ path: target, edits: [{ old: '', new: 'x' }] })).status).toBe(400);
    expect(readFileSync(target, 'utf8')).toBe('keep');
  });

  it('cuts the diff at 64 KiB on a line end and says so', async () => {
    const path = join(scratch.dir, 'big.txt');
    const line = 'word '.repeat(20);
    writeFileSync(path, Array.from({ length: 2000 }, () => line).join('\n') + '\n');
    const { status, body } = await edit({ path, edits: [{ old: 'word', new: 'WORD', count: 40_000 }] });
    expect(status).toBe(200);
    expect(body.diff_truncated).toBe(true);
    expect(Buffer.byteLength(body.diff)).toBeLessThanOrEqual(MAX_DIFF_BYTES);
    expect(body.diff.endsWith('\n')).toBe(true);
    expect(readFileSync(path, 'utf8')).not.toContain('word');
  });
});
