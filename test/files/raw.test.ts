import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTempName } from '../../src/files/atomic-write.js';
import { UPLOAD_LIMIT } from '../../src/files/upload.js';
import { SPLICE_MIN_BYTES } from '../../src/files/body-takeover.js';
import { isRoot, putRaw, sh, zeros } from '../helpers/files.js';
import { countFds, findReceivers, waitFor } from '../helpers/proc.js';
import { useScratchServer } from '../helpers/scratch-server.js';

const scratch = useScratchServer('envd-raw-');

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
const q = (path: string) => `path=${encodeURIComponent(path)}`;
const temps = (d: string) => readdirSync(d).filter(isTempName);
/** A PUT /files/raw declaring `length` bytes, for the caller to write (or not) and end or abort. */
function openUpload(target: string, length: number) {
  const req = request(`${scratch.server.url}/files/raw?${q(target)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${scratch.server.token}`, 'content-type': 'application/octet-stream', 'content-length': String(length) },
  });
  req.on('error', () => {});
  return req;
}
const upload = (path: string, body: Buffer, type = 'application/octet-stream') =>
  scratch.server.call('PUT', `/files/raw?${q(path)}`, undefined, { body: new Uint8Array(body), headers: { 'content-type': type } });

describe('PUT /files/raw and GET /files/raw', () => {
  it('round-trips random bytes exactly, creating parent directories', async () => {
    const bytes = randomBytes(3 * 1024 * 1024 + 17);
    const target = join(scratch.dir, 'a/b/c.bin');
    const put = await upload(target, bytes);
    expect(put.status).toBe(200);
    expect(await put.json()).toEqual({ path: target, size: bytes.length, sha256: sha256(bytes) });
    const got = await scratch.server.call('GET', `/files/raw?${q(target)}`);
    expect(got.status).toBe(200);
    expect(got.headers.get('content-type')).toBe('application/octet-stream');
    expect(got.headers.get('content-length')).toBe(String(bytes.length));
    expect(sha256(new Uint8Array(await got.arrayBuffer()))).toBe(sha256(bytes));
    expect(temps(join(scratch.dir, 'a/b'))).toEqual([]);
  });

  it('replaces an existing file and keeps its permissions', async () => {
    const target = join(scratch.dir, 'run.sh');
    writeFileSync(target, 'old', { mode: 0o755 });
    expect((await upload(target, Buffer.from('#!/bin/sh\necho new\n'))).status).toBe(200);
    expect(readFileSync(target, 'utf8')).toContain('echo new');
    expect(statSync(target).mode & 0o777).toBe(0o755);
  });

  it('answers a single Range with 206 and Content-Range, and an unsatisfiable one with 416', async () => {
    const target = join(scratch.dir, 'r.bin');
    const bytes = randomBytes(1000);
    writeFileSync(target, bytes);
    const cases: [string, number, number][] = [['bytes=10-19', 10, 19], ['bytes=990-', 990, 999], ['bytes=-5', 995, 999], ['bytes=995-5000', 995, 999]];
    for (const [range, start, end] of cases) {
      const response = await scratch.server.call('GET', `/files/raw?${q(target)}`, undefined, { headers: { range } });
      expect(response.status, range).toBe(206);
      expect(response.headers.get('content-range')).toBe(`bytes ${start}-${end}/1000`);
      expect(response.headers.get('content-length')).toBe(String(end - start + 1));
      expect(Buffer.from(await response.arrayBuffer()).equals(bytes.subarray(start, end + 1))).toBe(true);
    }
    const past = await scratch.server.call('GET', `/files/raw?${q(target)}`, undefined, { headers: { range: 'bytes=1000-' } });
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe('bytes */1000');
    expect((await past.json()).message).toMatch(/outside the file/);
    const several = await scratch.server.call('GET', `/files/raw?${q(target)}`, undefined, { headers: { range: 'bytes=0-1,5-6' } });
    expect(several.status).toBe(200);
    expect((await several.arrayBuffer()).byteLength).toBe(1000);
  });

  it('answers a missing file with 404 and a directory with 400', async () => {
    const missing = await scratch.server.json('GET', `/files/raw?${q(join(scratch.dir, 'nope'))}`);
    expect(missing.status).toBe(404);
    expect(missing.body.message).toMatch(/nope: no such file/);
    const directory = await scratch.server.json('GET', `/files/raw?${q(scratch.dir)}`);
    expect(directory.status).toBe(400);
    expect(directory.body.message).toMatch(/is a directory/);
  });

  it('closes the file when a client abandons a download halfway', async () => {
    const target = join(scratch.dir, 'large.bin');
    writeFileSync(target, Buffer.alloc(64 * 1024 * 1024));
    const fdsBefore = countFds();
    const controller = new AbortController();
    const response = await scratch.server.call('GET', `/files/raw?${q(target)}`, undefined, { signal: controller.signal });
    const reader = response.body!.getReader();
    await reader.read();
    controller.abort();
    await reader.read().catch(() => {});
    await waitFor(() => countFds() <= fdsBefore, 5_000, 'the download fd to be closed');
  });

  it('refuses any content type but application/octet-stream with 400, writing nothing', async () => {
    const target = join(scratch.dir, 'typed.txt');
    for (const type of ['application/json', 'text/plain', 'multipart/form-data; boundary=x']) {
      const response = await upload(target, Buffer.from('{"a":1}'), type);
      expect(response.status, type).toBe(400);
      expect((await response.json()).message).toMatch(/application\/octet-stream/);
    }
    expect(existsSync(target)).toBe(false);
  });

  it('refuses relative and NUL paths and unknown users with 400', async () => {
    for (const query of ['path=relative/x', `path=${encodeURIComponent(`${scratch.dir}/a\0b`)}`, `${q(join(scratch.dir, 'u'))}&username=no-such-user-envd`]) {
      const response = await scratch.server.call('PUT', `/files/raw?${query}`, undefined, { body: 'x', headers: { 'content-type': 'application/octet-stream' } });
      expect(response.status, query).toBe(400);
      expect((await response.json()).message).toMatch(/path: must|username: unknown user/);
    }
    expect(readdirSync(scratch.dir)).toEqual([]);
  });

  it('refuses a declared Content-Length over the limit with 413 before reading, writing nothing', async () => {
    const target = join(scratch.dir, 'huge.bin');
    writeFileSync(target, 'old');
    const result = await putRaw(scratch.server.url, scratch.server.token, q(target), Buffer.from('tiny'), { 'content-length': String(UPLOAD_LIMIT + 1) });
    expect(result.status).toBe(413);
    expect(result.body.message).toMatch(/500 MiB/);
    expect(readFileSync(target, 'utf8')).toBe('old');
    expect(temps(scratch.dir)).toEqual([]);
  });

  it('fails a chunked body with 413 the moment it passes the limit, leaving the old file and no temp', async () => {
    const target = join(scratch.dir, 'chunked.bin');
    writeFileSync(target, 'old');
    const result = await putRaw(scratch.server.url, scratch.server.token, q(target), zeros(UPLOAD_LIMIT + 1));
    expect(result.status).toBe(413);
    expect(readFileSync(target, 'utf8')).toBe('old');
    await waitFor(() => temps(scratch.dir).length === 0, 5_000, 'temp removed');
  }, 120_000);

  it('removes the temp file and keeps the old file when the client aborts mid-body, leaking no fd', async () => {
    const target = join(scratch.dir, 'aborted.bin');
    writeFileSync(target, 'old');
    const fdsBefore = countFds();
    const req = openUpload(target, 10 * 1024 * 1024);
    req.write(Buffer.alloc(256 * 1024));
    await waitFor(() => temps(scratch.dir).length === 1, 5_000, 'the temp file to appear');
    req.destroy();
    await waitFor(() => temps(scratch.dir).length === 0, 5_000, 'the temp file to be removed');
    expect(readFileSync(target, 'utf8')).toBe('old');
    await waitFor(() => countFds() <= fdsBefore, 5_000, 'fds back to where they were');
  });

  describe('bodies of SPLICE_MIN_BYTES and more, moved by the receiver (splice)', () => {
    /** PUT with node:http, writing the body in `pieces` with `pauseMs` between them; resolves with status, headers and body. */
    function put(target: string, body: Buffer, pieces = 1, pauseMs = 0): Promise<{ status: number; connection: string | undefined; body: string }> {
      return new Promise((resolve, reject) => {
        const req = openUpload(target, body.length);
        req.on('error', reject);
        req.on('response', (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body: text }));
        });
        const size = Math.ceil(body.length / pieces);
        void (async () => {
          for (let at = 0; at < body.length; at += size) {
            req.write(body.subarray(at, at + size));
            if (pauseMs) await new Promise((r) => setTimeout(r, pauseMs));
          }
          req.end();
        })();
      });
    }

    it('writes exact bytes at the edge and above it, and closes the connection after a spliced body', async () => {
      for (const [size, connection] of [[SPLICE_MIN_BYTES - 1, 'keep-alive'], [SPLICE_MIN_BYTES, 'close'], [5 * 1024 * 1024 + 3, 'close']] as const) {
        const bytes = randomBytes(size);
        const target = join(scratch.dir, `edge-${size}.bin`);
        const result = await put(target, bytes);
        expect(result.status, String(size)).toBe(200);
        expect(JSON.parse(result.body)).toMatchObject({ path: target, size });
        expect(result.connection, String(size)).toBe(connection);
        expect(sha256(readFileSync(target))).toBe(sha256(bytes));
      }
      expect(temps(scratch.dir)).toEqual([]);
      await waitFor(() => findReceivers().length === 0, 5_000, 'no receiver left');
    });

    it('waits for a slow client between pieces, and the next request on a new connection works', async () => {
      const bytes = randomBytes(3 * 1024 * 1024);
      const target = join(scratch.dir, 'slow.bin');
      const result = await put(target, bytes, 24, 40);
      expect(result.status).toBe(200);
      expect(sha256(readFileSync(target))).toBe(sha256(bytes));
      expect((await scratch.server.call('GET', '/health')).status).toBe(200);
    });

    it('ends the receiver, removes the temp and keeps the old file when the client aborts mid-body', async () => {
      const target = join(scratch.dir, 'aborted-splice.bin');
      writeFileSync(target, 'old');
      const fdsBefore = countFds();
      const req = openUpload(target, 8 * 1024 * 1024);
      req.write(Buffer.alloc(2 * 1024 * 1024));
      await waitFor(() => findReceivers().length === 1, 5_000, 'the receiver to start');
      req.destroy();
      await waitFor(() => findReceivers().length === 0 && temps(scratch.dir).length === 0, 5_000, 'the receiver to end and the temp file to go');
      expect(readFileSync(target, 'utf8')).toBe('old');
      await waitFor(() => countFds() <= fdsBefore, 5_000, 'fds back to where they were');
    });
  });

  if (!isRoot) console.warn('SKIPPED (not root): the 507 disk-full tests need root to mount a tmpfs; run the suite as root, as CI does');
  describe.runIf(isRoot)('on a full disk (root: mounts a 1 MiB tmpfs)', () => {
    let mount: string;
    beforeAll(() => {
      mount = mkdtempSync(join(tmpdir(), 'envd-full-'));
      sh('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mount]);
    });
    afterAll(() => {
      sh('umount', [mount]);
      rmSync(mount, { recursive: true, force: true });
    });

    it('answers 507 and leaves neither a partial file nor a temp', async () => {
      const target = join(mount, 'big.bin');
      const response = await upload(target, randomBytes(2 * 1024 * 1024));
      expect(response.status).toBe(507);
      expect((await response.json()).message).toMatch(/no space left/);
      expect(readdirSync(mount)).toEqual([]);
    });
  });
});
