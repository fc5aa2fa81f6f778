import { execFileSync } from 'node:child_process';
import { appendFileSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { buildApp } from '../../src/app.js';
import { generatedOpenApi } from '../../src/lifecycle/openapi.js';
import { createLogger } from '../../src/logger.js';
import { countFds, waitFor } from '../helpers/proc.js';
import { useScratchServer } from '../helpers/scratch-server.js';
import { testConfig, makeEnvdDirs } from '../helpers/server.js';

const scratch = useScratchServer('envd-download-');
const q = (path: string) => `path=${encodeURIComponent(path)}`;
const download = (path: string, init?: RequestInit) => scratch.server.call('GET', `/files/raw?${q(path)}`, undefined, init);

/** Reads a body to its end, or to the error that cut it short; returns how many bytes arrived and the error. */
async function drain(response: Response, afterFirst?: () => void): Promise<{ bytes: number; error: unknown }> {
  let bytes = 0;
  try {
    for await (const chunk of response.body!) {
      if (bytes === 0) afterFirst?.();
      bytes += chunk.length;
    }
    return { bytes, error: undefined };
  } catch (error) {
    return { bytes, error };
  }
}

describe('GET /files/raw: errors before and after the status line', () => {
  it('answers a file whose first read fails (/proc/self/mem: EIO) with 400 { message } as JSON', async () => {
    const response = await download('/proc/self/mem');
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await response.json()).toEqual({ message: '/proc/self/mem: cannot be read (EIO)' });
  });

  it('sends a size-0 file that has content (/proc/version) to its end, then serves the next request on the same connection', async () => {
    const response = await download('/proc/version');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-length')).toBeNull();
    expect(Buffer.from(await response.arrayBuffer()).toString()).toBe(readFileSync('/proc/version', 'utf8'));
    expect((await scratch.server.call('GET', '/health')).status).toBe(200);
  });

  it('refuses a character device (/dev/null, /dev/zero) with 400 before a byte is read: a device may never end', async () => {
    for (const device of ['/dev/null', '/dev/zero']) {
      const response = await download(device);
      expect(response.status).toBe(400);
      expect(await response.json()).toEqual({ message: `${device}: is a character device, not a regular file that can be read` });
    }
  });

  it('refuses a FIFO with 400 without opening it (opening would wait for a writer)', async () => {
    const fifo = join(scratch.dir, 'pipe');
    execFileSync('mkfifo', [fifo]);
    const response = await download(fifo);
    expect(response.status).toBe(400);
    expect((await response.json()).message).toMatch(/FIFO/);
  });

  it('refuses a Unix socket with 400, as a download and as a JSON read (before opening it, not a 500)', async () => {
    const path = join(scratch.dir, 'sock');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    try {
      const raw = await download(path);
      expect(raw.status).toBe(400);
      expect((await raw.json()).message).toMatch(/socket/);
      const read = await scratch.server.json('GET', `/files?${q(path)}`);
      expect(read.status).toBe(400);
      expect(read.body.message).toMatch(/socket/);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('never sends more than Content-Length when the file grows meanwhile', async () => {
    const target = join(scratch.dir, 'growing.log');
    const size = 32 * 1024 * 1024;
    writeFileSync(target, Buffer.alloc(size, 1));
    const response = await download(target);
    expect(response.headers.get('content-length')).toBe(String(size));
    const { bytes, error } = await drain(response, () => appendFileSync(target, Buffer.alloc(8 * 1024 * 1024, 2)));
    expect(error).toBeUndefined();
    expect(bytes).toBe(size);
    // Extra bytes would have been parsed as the start of this answer.
    expect((await scratch.server.call('GET', '/health')).status).toBe(200);
  });

  it('aborts the connection when the file shrinks midway: a short transfer, no error body appended, no fd left', async () => {
    const target = join(scratch.dir, 'shrinking.bin');
    const size = 64 * 1024 * 1024;
    writeFileSync(target, Buffer.alloc(size, 1));
    const fdsBefore = countFds();
    const response = await download(target);
    expect(response.status).toBe(200);
    const { bytes, error } = await drain(response, () => truncateSync(target, 1024 * 1024));
    expect(error).toBeDefined();
    expect(bytes).toBeLessThan(size);
    await waitFor(() => countFds() <= fdsBefore, 5_000, 'the file handle and socket to be closed');
  });

  it('keeps a 416 its Content-Range while its body is JSON', async () => {
    const target = join(scratch.dir, 'small.txt');
    writeFileSync(target, 'hello');
    const response = await download(target, { headers: { range: 'bytes=10-' } });
    expect(response.status).toBe(416);
    expect(response.headers.get('content-range')).toBe('bytes */5');
    expect(response.headers.get('content-type')).toMatch(/^application\/json/);
    expect((await response.json()).message).toMatch(/outside the file/);
  });
});

describe('the error handler after the status line', () => {
  it('aborts the connection instead of appending an error body', async () => {
    const dirs = makeEnvdDirs();
    onTestFinished(() => dirs.remove());
    const config = testConfig({ accessToken: 't', stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
    const app = await buildApp({ config, logger: createLogger('fatal', new Writable({ write: (_c, _e, done) => done() })), openApi: generatedOpenApi });
    // A route that fails after writing its status line and some bytes itself.
    app.get('/partial', { config: { auth: 'public' } }, async (_request, reply) => {
      reply.raw.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' });
      await new Promise((flushed) => reply.raw.write('partial', flushed));
      throw new Error('failed midway');
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const { port } = app.server.address() as import('node:net').AddressInfo;
      const response = await fetch(`http://127.0.0.1:${port}/partial`);
      expect(response.status).toBe(200);
      const { bytes, error } = await drain(response);
      expect(error).toBeDefined();
      expect(bytes).toBe('partial'.length);
    } finally {
      await app.close();
    }
  });
});
