// Whole directories as tar (issue 27 §3) and checksums (§4), against a real
// server and GNU tar on both sides: a tree with modes, mtimes, symlinks, an
// empty directory, unicode and a long name goes out and comes back the same;
// extraction is all or nothing in each mode; hostile entries are refused by
// name with nothing left; a malformed archive is a 400 and a bomb a 413.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { SPLICE_MIN_BYTES } from '../../src/files/body-takeover.js';
import { countFds, findHolderJobs, waitFor } from '../helpers/proc.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-archive-');
const q = (params: Record<string, string>) => new URLSearchParams(params).toString();
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
const LONG = `${'long-name-'.repeat(12)}end.txt`;

/** A tree of every kind envd archives, with set modes and mtimes. */
function makeTree(root: string): void {
  mkdirSync(join(root, 'sub/deeper'), { recursive: true });
  mkdirSync(join(root, 'empty'));
  writeFileSync(join(root, 'a.txt'), 'hello\n');
  writeFileSync(join(root, 'sub/script.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
  writeFileSync(join(root, 'sub/deeper/bin.dat'), randomBytes(300_000));
  writeFileSync(join(root, 'sub/naïve ünïcode.txt'), 'ü');
  writeFileSync(join(root, LONG), 'long');
  writeFileSync(join(root, 'private'), 'secret', { mode: 0o600 });
  symlinkSync('sub/script.sh', join(root, 'link'));
  for (const path of ['a.txt', 'sub/script.sh', 'private', LONG]) utimesSync(join(root, path), 1_600_000_000, 1_600_000_000);
}

/** Every entry under root: kind, mode, mtime (files), content hash or link target. */
function describeTree(root: string, dir = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(join(root, dir)).sort()) {
    const rel = join(dir, name);
    const info = lstatSync(join(root, rel));
    if (info.isSymbolicLink()) out[rel] = `link -> ${readlinkSync(join(root, rel))}`;
    else if (info.isDirectory()) {
      out[rel] = `dir ${(info.mode & 0o7777).toString(8)}`;
      Object.assign(out, describeTree(root, rel));
    } else out[rel] = `file ${(info.mode & 0o7777).toString(8)} ${Math.floor(info.mtimeMs / 1000)} ${sha256(readFileSync(join(root, rel)))}`;
  }
  return out;
}

async function download(path: string, format = 'tar'): Promise<Response> {
  return scratch.server.call('GET', `/files/archive?${q({ path, format })}`);
}

async function upload(path: string, body: Uint8Array, params: Record<string, string> = {}, type = 'application/x-tar'): Promise<{ status: number; body: any }> {
  const res = await scratch.server.call('PUT', `/files/archive?${q({ path, ...params })}`, undefined, { body: body as unknown as BodyInit, headers: { 'content-type': type } });
  return { status: res.status, body: await res.json() };
}

/** A hand-made archive, for what GNU tar would not write. */
async function handMade(entries: Array<{ header: Record<string, unknown>; body?: string }>): Promise<Buffer> {
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (chunk) => chunks.push(chunk as Buffer));
  const done = new Promise<void>((resolve) => tar.on('end', () => resolve()));
  for (const { header, body } of entries) await new Promise<void>((resolve, reject) => tar.entry(header as never, body ?? '', (error) => (error ? reject(error) : resolve())));
  tar.finalize();
  await done;
  return Buffer.concat(chunks);
}

const leftovers = (dir: string) => readdirSync(dir).filter((name) => name.startsWith('.envd-archive-'));

describe('GET /files/archive', () => {
  it.each(['tar', 'tar.gz'])('streams the tree as %s: GNU tar unpacks the same files, modes, mtimes, links and empty dirs', async (format) => {
    const source = join(scratch.dir, 'source');
    makeTree(source);
    const res = await download(source, format);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe(format === 'tar' ? 'application/x-tar' : 'application/gzip');
    const file = join(scratch.dir, `out.${format}`);
    writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    const unpacked = join(scratch.dir, 'unpacked');
    mkdirSync(unpacked);
    execFileSync('tar', ['-xpf', file, '-C', unpacked]);
    expect(describeTree(unpacked)).toEqual(describeTree(source));
  });

  it('answers 404 for a missing path and 400 for a file', async () => {
    expect((await download(join(scratch.dir, 'none'))).status).toBe(404);
    writeFileSync(join(scratch.dir, 'f'), 'x');
    const res = await download(join(scratch.dir, 'f'));
    expect(res.status).toBe(400);
    expect((await res.json()).message).toMatch(/is not a directory/);
  });
});

describe('PUT /files/archive', () => {
  it.each([
    ['tar', false],
    ['tar.gz', true],
  ])('extracts a GNU %s into a new directory and answers its counts and sha256', async (_, gzip) => {
    const source = join(scratch.dir, 'source');
    makeTree(source);
    const archive = execFileSync('tar', [gzip ? '-czf' : '-cf', '-', '-C', source, '.']);
    const target = join(scratch.dir, 'target');
    const { status, body } = await upload(target, archive, {}, gzip ? 'application/gzip' : 'application/x-tar');
    expect(status).toBe(200);
    expect(body).toEqual({ path: target, files: 6, bytes: expect.any(Number), sha256: sha256(archive) });
    expect(describeTree(target)).toEqual(describeTree(source));
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it('writes large files whole, whatever their size against the 256 KiB small-file limit and the 1 MiB pieces written behind the parsing', async () => {
    const source = join(scratch.dir, 'sizes');
    mkdirSync(source);
    const sizes = [256 * 1024 - 1, 256 * 1024, 256 * 1024 + 1, 1024 * 1024, 1024 * 1024 + 7, 3 * 1024 * 1024 + 512];
    for (const size of sizes) writeFileSync(join(source, `f${size}`), randomBytes(size));
    writeFileSync(join(source, 'small'), 'between the large ones');
    const archive = execFileSync('tar', ['-cf', '-', '-C', source, '.'], { maxBuffer: 64 * 1024 * 1024 });
    const target = join(scratch.dir, 'sizes-out');
    const { status, body } = await upload(target, archive);
    expect(status).toBe(200);
    expect(body.files).toBe(sizes.length + 1);
    for (const name of readdirSync(source)) expect(sha256(readFileSync(join(target, name))), name).toBe(sha256(readFileSync(join(source, name))));
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it('creates only where nothing is (409), merges into what is there, or replaces it whole', async () => {
    const target = join(scratch.dir, 'target');
    mkdirSync(join(target, 'keep'), { recursive: true });
    writeFileSync(join(target, 'keep/old.txt'), 'old');
    writeFileSync(join(target, 'over.txt'), 'before');
    const archive = await handMade([
      { header: { name: 'over.txt' }, body: 'after' },
      { header: { name: 'keep/new.txt' }, body: 'new' },
    ]);
    expect(await upload(target, archive)).toMatchObject({ status: 409, body: { message: expect.stringMatching(/exists; use mode=merge or mode=replace/) } });
    expect((await upload(target, archive, { mode: 'merge' })).status).toBe(200);
    expect(describeTree(target)).toMatchObject({ 'keep/old.txt': expect.any(String), 'keep/new.txt': expect.any(String) });
    expect(readFileSync(join(target, 'over.txt'), 'utf8')).toBe('after');
    expect((await upload(target, await handMade([{ header: { name: 'only.txt' }, body: 'x' }]), { mode: 'replace' })).status).toBe(200);
    expect(readdirSync(target)).toEqual(['only.txt']);
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it.each([
    ['a name with ..', [{ header: { name: 'ok.txt' }, body: 'fine' }, { header: { name: '../evil.txt' }, body: 'x' }], /"\.\.\/evil\.txt": it leaves the directory/],
    ['an absolute name', [{ header: { name: '/etc/evil' }, body: 'x' }], /"\/etc\/evil": an absolute path/],
    ['a file written through an outward symlink', [{ header: { name: 'out', type: 'symlink', linkname: '..' } }, { header: { name: 'out/evil.txt' }, body: 'x' }], /"out\/evil\.txt": a directory on its path is a symlink/],
    ['a file written through an absolute symlink', [{ header: { name: 'abs', type: 'symlink', linkname: '/' } }, { header: { name: 'abs/evil.txt' }, body: 'x' }], /"abs\/evil\.txt": a directory on its path is a symlink/],
    ['a symlink where the archive made a directory', [{ header: { name: 'a', type: 'directory' } }, { header: { name: 'a', type: 'symlink', linkname: '..' } }], /"a": a symlink where the archive made a directory/],
    ['a file written through a symlink', [{ header: { name: 'd', type: 'symlink', linkname: '.' } }, { header: { name: 'd/x.txt' }, body: 'x' }], /"d\/x\.txt": a directory on its path is a symlink/],
    ['a hard link out', [{ header: { name: 'h', type: 'link', linkname: '/etc/passwd' } }], /"h": a hard link to "\/etc\/passwd", which is not a file extracted before it/],
    ['a device node', [{ header: { name: 'dev', type: 'character-device', devmajor: 1, devminor: 3 } }], /"dev": a character device/],
    ['a fifo', [{ header: { name: 'pipe', type: 'fifo' } }], /"pipe": a fifo/],
    ['a file where a directory was', [{ header: { name: 'a', type: 'directory' } }, { header: { name: 'a' }, body: 'x' }], /"a": a file where the archive made a directory/],
    ['a large file where a directory was', [{ header: { name: 'a', type: 'directory' } }, { header: { name: 'a' }, body: 'x'.repeat(300_000) }], /"a": a file where the archive made a directory/],
    ['a directory where a file was', [{ header: { name: 'a' }, body: 'x' }, { header: { name: 'a', type: 'directory' } }], /"a": cannot be written \(EEXIST\)/],
    ['a file under a file', [{ header: { name: 'a' }, body: 'x' }, { header: { name: 'a/b' }, body: 'y' }], /"a\/b": cannot be written \(EEXIST\)/],
    ['a hard link onto its own file', [{ header: { name: 'a' }, body: 'x' }, { header: { name: 'a', type: 'link', linkname: 'a' } }], /"a": cannot be written \(EEXIST\)/],
  ])('refuses %s with a 400 naming the entry, and writes nothing', async (_, entries, message) => {
    const target = join(scratch.dir, 'target');
    const { status, body } = await upload(target, await handMade(entries as never));
    expect(status).toBe(400);
    expect(body.message).toMatch(message);
    expect(existsSync(target)).toBe(false);
    expect(existsSync(join(scratch.dir, 'evil.txt'))).toBe(false);
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it.each([
    ['the same file twice: the later wins', [{ header: { name: 'a' }, body: 'x' }, { header: { name: 'a' }, body: 'yy' }], 'yy'],
    ['the same large file twice', [{ header: { name: 'a' }, body: 'x'.repeat(300_000) }, { header: { name: 'a' }, body: 'y'.repeat(300_000) }], 'y'.repeat(300_000)],
    ['a file over a symlink of its name', [{ header: { name: 'a', type: 'symlink', linkname: 'b' } }, { header: { name: 'a' }, body: 'z' }], 'z'],
  ])('extracts %s', async (_, entries, content) => {
    const target = join(scratch.dir, 'target');
    expect((await upload(target, await handMade(entries as never))).status).toBe(200);
    expect(readFileSync(join(target, 'a'), 'utf8')).toBe(content);
  });

  it('answers 400 for random bytes, a truncated tar and a broken gzip, and leaves nothing', async () => {
    const good = await handMade([{ header: { name: 'big.bin' }, body: 'y'.repeat(100_000) }]);
    const gz = gzipSync(good);
    for (const [body, type] of [
      [randomBytes(4096), 'application/x-tar'],
      [good.subarray(0, 10_000), 'application/x-tar'],
      [good.subarray(0, good.length - 1024), 'application/x-tar'], // whole entries, no end-of-archive blocks
      [Buffer.alloc(0), 'application/x-tar'],
      [gz.subarray(0, gz.length / 2), 'application/gzip'],
    ] as const) {
      const target = join(scratch.dir, 'target');
      const { status, body: answer } = await upload(target, new Uint8Array(body), {}, type);
      expect(status, JSON.stringify(answer)).toBe(400);
      expect(answer.message).toMatch(/not a valid tar or tar\.gz archive|archive entry/);
      expect(existsSync(target)).toBe(false);
      expect(leftovers(scratch.dir)).toEqual([]);
    }
    // No body at all (no content type: nothing to stream), and JSON where an archive belongs.
    const target = join(scratch.dir, 'target');
    for (const init of [{}, { body: '{"a":1}', headers: { 'content-type': 'application/json' } }]) {
      const res = await scratch.server.call('PUT', `/files/archive?${q({ path: target })}`, undefined, init);
      expect(res.status).toBe(400);
      expect((await res.json()).message).toMatch(/body: a tar or tar\.gz archive is required/);
    }
    expect(existsSync(target)).toBe(false);
  });

  it('answers 413 for an entry that would fill the disk (a gzip bomb stops at its header), and leaves nothing', async () => {
    // A ustar header declaring 1 TiB (base-256 size, as GNU tar writes large sizes), then a few bytes of it.
    const header = Buffer.alloc(512);
    header.write('bomb.bin', 0);
    header.write('0000644\0', 100);
    header.write('0000000\0', 108);
    header.write('0000000\0', 116);
    header[124] = 0x80;
    header.writeBigUInt64BE(2n ** 40n, 128); // the last 8 of the 12 size bytes
    header.write('00000000000\0', 136);
    header.write('0', 156);
    header.write('ustar\0' + '00', 257);
    header.fill(' ', 148, 156);
    let sum = 0;
    for (const byte of header) sum += byte;
    header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    const bomb = gzipSync(Buffer.concat([header, Buffer.alloc(1024 * 1024)]));
    const target = join(scratch.dir, 'target');
    const { status, body } = await upload(target, bomb, {}, 'application/gzip');
    expect(status, JSON.stringify(body)).toBe(413);
    expect(body.message).toMatch(/"bomb\.bin": 1099511627776 bytes would leave less than 67108864 bytes free on the disk/);
    expect(existsSync(target)).toBe(false);
    expect(leftovers(scratch.dir)).toEqual([]);
  });
});

/** Whether envd hashes a large archive in the relay on this machine (archive-relay.ts: a second CPU with SHA extensions). */
const relayExpected = availableParallelism() > 1 && /^flags\s*:.*\bsha_ni\b/m.test(readFileSync('/proc/cpuinfo', 'latin1'));
const relays = () => findHolderJobs('--relay');

/** PUT /files/archive with a Content-Length, the body written in `pieces`; `abortAfter` pieces, the client goes away instead. */
function putArchive(path: string, body: Buffer, { pieces = 4, abortAfter }: { pieces?: number; abortAfter?: number } = {}): Promise<{ status: number; connection?: string; body: any }> {
  return new Promise((resolve, reject) => {
    const url = new URL(`/files/archive?${q({ path })}`, scratch.server.url);
    const headers = { authorization: `Bearer ${scratch.server.token}`, 'content-type': 'application/x-tar', 'content-length': body.length };
    const req = httpRequest(url, { method: 'PUT', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body: JSON.parse(text) }));
    });
    req.on('error', abortAfter === undefined ? reject : () => resolve({ status: 0, body: undefined }));
    const size = Math.ceil(body.length / pieces);
    void (async () => {
      for (let at = 0, piece = 0; at < body.length; at += size, piece++) {
        if (piece === abortAfter) {
          await waitFor(() => relays().length > 0 || !relayExpected, 5_000, 'the relay to start');
          req.destroy();
          return;
        }
        if (!req.write(body.subarray(at, at + size))) await new Promise((r) => req.once('drain', r));
        await new Promise((r) => setTimeout(r, 10));
      }
      req.end();
    })();
  });
}

describe(`PUT /files/archive of SPLICE_MIN_BYTES and more (hashed by the relay: ${relayExpected ? 'yes' : 'no, hashed here'} on this machine)`, () => {
  /** A tar of one file, `size` bytes in all (a multiple of 512): header, data, two end blocks. */
  async function tarOfSize(size: number): Promise<{ archive: Buffer; data: Buffer }> {
    const data = randomBytes(size - 512 - 1024);
    const archive = await handMade([{ header: { name: 'one.bin', size: data.length, mode: 0o644 }, body: data as unknown as string }]);
    expect(archive.length).toBe(size);
    return { archive, data };
  }

  it('extracts bodies below and at the edge exactly, answers their sha256, and closes the connection after a relayed one', async () => {
    for (const [size, relayed] of [[SPLICE_MIN_BYTES - 512, false], [SPLICE_MIN_BYTES, relayExpected]] as const) {
      const { archive, data } = await tarOfSize(size);
      const target = join(scratch.dir, `edge-${size}`);
      const answer = await putArchive(target, archive);
      expect(answer.status, `${size}: ${JSON.stringify(answer.body)}`).toBe(200);
      expect(answer.body).toEqual({ path: target, files: 1, bytes: data.length, sha256: sha256(archive) });
      expect(answer.connection, String(size)).toBe(relayed ? 'close' : 'keep-alive');
      expect(sha256(readFileSync(join(target, 'one.bin')))).toBe(sha256(data));
    }
    await waitFor(() => relays().length === 0, 5_000, 'no relay left');
  });

  it.each([
    ['tar', false],
    ['tar.gz', true],
  ])('moves a %s of 6 MiB intact, and its sha256 is that of the bytes sent', async (_, gzip) => {
    const source = join(scratch.dir, 'source');
    makeTree(source);
    for (let i = 0; i < 3; i++) writeFileSync(join(source, `big${i}.bin`), randomBytes(2 * 1024 * 1024 - i));
    const tarred = execFileSync('tar', ['-cf', '-', '-C', source, '.'], { maxBuffer: 64 * 1024 * 1024 });
    const archive = gzip ? gzipSync(tarred) : tarred;
    const target = join(scratch.dir, 'target');
    const answer = await putArchive(target, archive, { pieces: 7 });
    expect(answer.status).toBe(200);
    expect(answer.body.sha256).toBe(sha256(archive));
    expect(describeTree(target)).toEqual(describeTree(source));
    expect(leftovers(scratch.dir)).toEqual([]);
  });

  it('refuses a hostile entry after megabytes of good ones by name, leaves nothing, ends the relay, and answers while the client still sends', async () => {
    const archive = await handMade([
      { header: { name: 'good.bin', size: 3 * 1024 * 1024 }, body: randomBytes(3 * 1024 * 1024) as unknown as string },
      { header: { name: '../escape.txt', size: 3 }, body: 'bad' },
      { header: { name: 'after.bin', size: 2 * 1024 * 1024 }, body: randomBytes(2 * 1024 * 1024) as unknown as string },
    ]);
    const target = join(scratch.dir, 'target');
    const answer = await putArchive(target, archive, { pieces: 10 });
    expect(answer.status).toBe(400);
    expect(answer.body.message).toMatch(/"\.\.\/escape\.txt".*nothing was written/);
    expect(existsSync(target)).toBe(false);
    expect(leftovers(scratch.dir)).toEqual([]);
    await waitFor(() => relays().length === 0, 5_000, 'the relay to end');
    expect((await scratch.server.call('GET', '/health')).status).toBe(200);
  });

  it('answers 409 for a target that exists before the body has begun, ends the relay, and keeps serving', async () => {
    const { archive } = await tarOfSize(2 * 1024 * 1024);
    const target = join(scratch.dir, 'exists');
    mkdirSync(target);
    // Headers alone first: the route refuses while the relay has nothing to pass on yet.
    const answer = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const url = new URL(`/files/archive?${q({ path: target })}`, scratch.server.url);
      const req = httpRequest(url, { method: 'PUT', headers: { authorization: `Bearer ${scratch.server.token}`, 'content-type': 'application/x-tar', 'content-length': archive.length } }, (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          resolve({ status: res.statusCode!, body: JSON.parse(text) });
          req.destroy();
        });
      });
      req.on('error', () => {});
      req.flushHeaders();
      setTimeout(() => req.write(archive), 1_000).unref();
      setTimeout(() => reject(new Error('no answer')), 10_000).unref();
    });
    expect(answer.status).toBe(409);
    expect(answer.body.message).toMatch(/exists/);
    expect(readdirSync(target)).toEqual([]);
    await waitFor(() => relays().length === 0, 5_000, 'the relay to end');
    expect((await scratch.server.call('GET', '/health')).status).toBe(200);
  });

  it('answers 400 for a body that is whole but a truncated tar, and leaves nothing', async () => {
    const { archive } = await tarOfSize(4 * 1024 * 1024);
    const cut = archive.subarray(0, 2 * 1024 * 1024 + 100);
    const answer = await putArchive(join(scratch.dir, 'target'), cut);
    expect(answer.status).toBe(400);
    // Where it ended says every byte sent reached the parser (none was dropped on the way).
    expect(answer.body.message).toMatch(/not a valid tar or tar.gz archive \(unexpected end of the archive in the data of "one.bin"\)/);
    expect(leftovers(scratch.dir)).toEqual([]);
    await waitFor(() => relays().length === 0, 5_000, 'no relay left');
  });

  it('ends the relay, leaves nothing and leaks no fd when the client goes away mid-body', async () => {
    const { archive } = await tarOfSize(8 * 1024 * 1024);
    const fdsBefore = countFds();
    const answer = await putArchive(join(scratch.dir, 'target'), archive, { pieces: 8, abortAfter: 3 });
    expect(answer.status).toBe(0);
    await waitFor(() => relays().length === 0 && leftovers(scratch.dir).length === 0, 5_000, 'the relay to end and the temporary tree to go');
    expect(existsSync(join(scratch.dir, 'target'))).toBe(false);
    await waitFor(() => countFds() <= fdsBefore, 5_000, 'fds back to where they were');
  });
});

describe('checksums', () => {
  it('answers the sha256 of what an upload, a JSON write and a batch wrote, and computes one on GET /files/info?checksum=sha256', async () => {
    const bytes = randomBytes(2 * 1024 * 1024);
    const raw = await scratch.server.call('PUT', `/files/raw?${q({ path: join(scratch.dir, 'raw.bin') })}`, undefined, { body: new Uint8Array(bytes), headers: { 'content-type': 'application/octet-stream' } });
    expect(await raw.json()).toMatchObject({ size: bytes.length, sha256: sha256(bytes) });
    expect((await scratch.server.json('POST', '/files', { path: join(scratch.dir, 'w.txt'), data: 'written' })).body).toMatchObject({ sha256: sha256(Buffer.from('written')) });
    const batch = await scratch.server.json('POST', '/files/batch', { files: [{ path: join(scratch.dir, 'b1'), data: 'one' }, { path: join(scratch.dir, 'b2'), data: 'two' }] });
    expect(batch.body.files.map((f: { sha256: string }) => f.sha256)).toEqual([sha256(Buffer.from('one')), sha256(Buffer.from('two'))]);
    const info = await scratch.server.json('GET', `/files/info?${q({ path: join(scratch.dir, 'raw.bin'), checksum: 'sha256' })}`);
    expect(info.body).toMatchObject({ type: 'file', sha256: sha256(bytes) });
    expect((await scratch.server.json('GET', `/files/info?${q({ path: join(scratch.dir, 'raw.bin') })}`)).body.sha256).toBeUndefined();
    const dir = await scratch.server.json('GET', `/files/info?${q({ path: scratch.dir, checksum: 'sha256' })}`);
    expect(dir).toEqual({ status: 400, body: { message: `checksum: ${scratch.dir} is a directory, not a regular file` } });
    expect((await scratch.server.json('GET', `/files/info?${q({ path: scratch.dir, checksum: 'md5' })}`)).status).toBe(400);
  });

  it.each([
    ['spliced, arriving in pauses the hash has to wait through', true],
    ['chunked, written by envd itself', false],
  ])('answers the sha256 of a raw upload %s', async (_, withLength) => {
    const pieces = Array.from({ length: 6 }, () => randomBytes(1024 * 1024 + 333));
    const whole = Buffer.concat(pieces);
    const path = join(scratch.dir, withLength ? 'slow.bin' : 'chunked.bin');
    const url = new URL(`/files/raw?${q({ path })}`, scratch.server.url);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const headers: Record<string, string | number> = { authorization: `Bearer ${scratch.server.token}`, 'content-type': 'application/octet-stream' };
      if (withLength) headers['content-length'] = whole.length;
      const req = httpRequest(url, { method: 'PUT', headers }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (text) => (body += text)).on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject);
      void (async () => {
        for (const piece of pieces) {
          req.write(piece);
          await new Promise((r) => setTimeout(r, 30));
        }
        req.end();
      })();
    });
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ size: whole.length, sha256: sha256(whole) });
    expect(sha256(readFileSync(path))).toBe(sha256(whole));
  });
});
