import { mkdtempSync, readdirSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JSON_BODY_LIMIT } from '../../src/app.js';
import { isTempName } from '../../src/files/atomic-write.js';
import { UPLOAD_LIMIT } from '../../src/files/upload.js';
import { LINGER_MAX_MS, closeAfterLingering } from '../../src/lingering-close.js';
import { jsonHead, postJsonOverLimit, putChunkedOverLimit, putDeclaredOverLimit, sendWholeThenRead, uploadHead } from '../helpers/oversized.js';
import { countFds, rssBytes, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';

// envd in its own process, as deployed: a client in the same event loop as the
// server would hide the race between the answer and the connection's reset.
const token = 'oversized-token';
let envd: EnvdProcess;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'envd-oversized-'));
  envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: token });
});
afterAll(async () => {
  await envd?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const pid = () => envd.child.pid!;
const tooLarge = { status: 413, body: { message: expect.any(String) } };

/** Samples envd's RSS every 20 ms while `work` runs; returns the highest. */
async function peakRss<T>(work: () => Promise<T>): Promise<{ peak: number; result: T }> {
  let peak = rssBytes(pid());
  const timer = setInterval(() => (peak = Math.max(peak, rssBytes(pid()))), 20);
  try {
    return { peak, result: await work() };
  } finally {
    clearInterval(timer);
    peak = Math.max(peak, rssBytes(pid()));
  }
}

describe('a 413 reaches a client that is still sending (lingering close)', () => {
  it('answers ten 11 MiB JSON bodies in a row, sent with fetch, with 413 { message }', async () => {
    for (let i = 0; i < 10; i++) expect(await postJsonOverLimit(envd.url, token, join(dir, 'j.txt')), `try ${i}`).toEqual(tooLarge);
  });

  it('answers ten 11 MiB JSON bodies with a wrong token, sent with fetch, with 401 { message } (refused before the body is read)', async () => {
    for (let i = 0; i < 10; i++) {
      expect(await postJsonOverLimit(envd.url, 'wrong-token', join(dir, 'j.txt')), `try ${i}`).toEqual({ status: 401, body: { message: 'invalid access token' } });
    }
  });

  it('answers ten uploads declaring over 500 MiB and sending real bytes with 413, writing nothing', async () => {
    const target = join(dir, 'declared.bin');
    writeFileSync(target, 'old');
    for (let i = 0; i < 10; i++) {
      const result = await putDeclaredOverLimit(envd.url, token, target);
      expect(result, `try ${i}`).toEqual(tooLarge);
      expect(result.body.message).toMatch(/500 MiB/);
    }
    expect(readFileSync(target, 'utf8')).toBe('old');
  }, 120_000);

  it('answers ten chunked uploads passing 500 MiB with 413, leaving the old file and no temp', async () => {
    const target = join(dir, 'chunked.bin');
    writeFileSync(target, 'old');
    for (let i = 0; i < 10; i++) expect(await putChunkedOverLimit(envd.url, token, target), `try ${i}`).toEqual(tooLarge);
    expect(readFileSync(target, 'utf8')).toBe('old');
    await waitFor(() => readdirSync(dir).filter(isTempName).length === 0, 5_000, 'temps removed');
  }, 180_000);

  it('answers a client that writes its whole over-limit body before reading (ten JSON, one 520 MiB upload), keeping its memory flat', async () => {
    const length = JSON_BODY_LIMIT + 1024 * 1024;
    for (let i = 0; i < 10; i++) {
      expect(await sendWholeThenRead(envd.url, jsonHead(envd.url, token, length), length), `try ${i}`).toEqual(tooLarge);
    }
    const idle = rssBytes(pid());
    const size = UPLOAD_LIMIT + 20 * 1024 * 1024;
    const { peak, result } = await peakRss(() => sendWholeThenRead(envd.url, uploadHead(envd.url, token, join(dir, 'whole.bin'), size), size));
    expect(result).toEqual(tooLarge);
    console.log(`discarding a 520 MiB refused upload: envd RSS idle ${(idle / 2 ** 20).toFixed(1)} MiB, peak +${((peak - idle) / 2 ** 20).toFixed(1)} MiB`);
    // Discarding 520 MiB holds no more than a few socket buffers.
    expect(peak - idle).toBeLessThan(32 * 1024 * 1024);
  }, 60_000);

  it('keeps the connection of a complete request alive, and says close on an early answer', async () => {
    const health = await fetch(`${envd.url}/health`);
    expect(health.headers.get('connection')).toBe('keep-alive');
    const refused = await new Promise<string | undefined>((resolve, reject) => {
      const req = request(`${envd.url}/files/raw?path=${encodeURIComponent(join(dir, 'x'))}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain', 'content-length': '10000000' },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.headers.connection);
        req.destroy();
      });
      req.on('error', reject);
      req.write(Buffer.alloc(64 * 1024));
    });
    expect(refused).toBe('close');
  });

  it('lets go of a client that stops sending without closing, and leaks no fd', async () => {
    const fdsBefore = countFds(pid());
    const length = JSON_BODY_LIMIT * 2;
    const url = new URL(envd.url);
    // 11 MiB of a declared 20 MiB, then silence with the connection left open (half-open: envd's FIN is ignored).
    const socket = connect({ port: Number(url.port), host: url.hostname, allowHalfOpen: true });
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (text: string) => (received += text));
    socket.on('error', () => {});
    socket.write(jsonHead(envd.url, token, length));
    socket.write(Buffer.alloc(11 * 1024 * 1024, 'a'));
    try {
      await waitFor(() => received.startsWith('HTTP/1.1 413'), 5_000, 'the 413');
      await waitFor(() => countFds(pid()) > fdsBefore === false, LINGER_MAX_MS + 2_000, 'envd to close the lingering connection');
    } finally {
      socket.destroy();
    }
  }, 20_000);
});

/**
 * A raw client that sends `head`, then `chunk` after `chunk` (every `pauseMs`,
 * or as fast as the socket takes them; `stopAfter` chunks, then silence without
 * closing), reading the answer as it comes, until the server closes the connection.
 */
function keepSending(base: string, head: string, chunk: Buffer, { pauseMs, stopAfter = Infinity }: { pauseMs: number; stopAfter?: number }) {
  const url = new URL(base);
  return new Promise<{ status: number; sent: number; closedAt: number }>((resolve) => {
    const socket = connect({ port: Number(url.port), host: url.hostname, allowHalfOpen: true });
    let received = '';
    let sent = 0;
    let chunks = 0;
    socket.setEncoding('utf8');
    socket.on('data', (text: string) => (received += text));
    socket.on('error', () => {});
    socket.on('close', () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0), sent, closedAt: Date.now() }));
    const pump = () => {
      if (socket.destroyed || socket.writableEnded || chunks >= stopAfter) return;
      chunks++;
      sent += chunk.length;
      const more = socket.write(chunk);
      if (pauseMs) setTimeout(pump, pauseMs);
      else if (more) setImmediate(pump);
      else socket.once('drain', pump);
    };
    socket.on('connect', () => {
      socket.write(head);
      pump();
    });
  });
}

describe('closeAfterLingering bounds', () => {
  let server: Server;
  afterAll(() => server?.close());

  it('stops reading after maxBytes and after maxMs, however fast or slowly the client keeps sending', async () => {
    const bounds = { maxMs: 1_500, idleMs: 1_000, maxBytes: 4 * 1024 * 1024 };
    server = createServer((req, res) => {
      closeAfterLingering(req, res, bounds);
      res.writeHead(413, { 'content-type': 'application/json' }).end('{"message":"too large"}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const head = `PUT / HTTP/1.1\r\nhost: x\r\ncontent-length: ${1024 ** 3}\r\n\r\n`;
    const send = (chunk: Buffer, pauseMs: number) => keepSending(base, head, chunk, { pauseMs });
    // Fast: cut once about maxBytes have been dropped (checked every 50 ms, plus socket buffers), long before its 1 GiB.
    const fast = await send(Buffer.alloc(256 * 1024), 0);
    expect(fast.status).toBe(413);
    expect(fast.sent).toBeLessThan(256 * 1024 * 1024);
    // Slow but never idle for idleMs: cut at maxMs.
    const started = Date.now();
    const slow = await send(Buffer.alloc(1024), 100);
    expect(slow.status).toBe(413);
    expect(slow.closedAt - started).toBeLessThan(bounds.maxMs + 2_000);
    expect(slow.closedAt - started).toBeGreaterThanOrEqual(bounds.maxMs - 100);
  }, 20_000);
});
