import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, readlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JSON_BODY_LIMIT } from '../../src/app.js';
import { isTempName } from '../../src/files/atomic-write.js';
import { jsonHead, postJsonOverLimit, putChunkedOverLimit, putDeclaredOverLimit, sendWholeThenRead } from '../helpers/oversized.js';
import { findProcesses, findReceivers, rssBytes, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';
import { startProxiedEnvd, type ProxiedEnvd } from './fixture.js';
import type { Nginx } from './nginx.js';

// envd behind nginx configured as the control plane forwards (see nginx.ts):
// every request below goes to http://127.0.0.1:<nginx>/sandboxes/<id>/...
/**
 * envd's RSS may grow at most this much over its idle RSS while 200 MiB go up
 * and down through the proxy: the contract's budget. Measured: upload +3-5 MiB,
 * both +7 MiB (before downloads recycled their read buffers: +37-76 MiB).
 */
const TRANSFER_RSS_BUDGET = 64 * 1024 * 1024;

let envd: EnvdProcess;
let nginx: Nginx;
let dir: string;
let proxied: ProxiedEnvd | undefined;
let token: string;
const markers: string[] = [];

beforeAll(async () => {
  proxied = await startProxiedEnvd('proxy', { workdir: true });
  ({ envd, nginx, dir, token } = proxied);
});
afterEach(() => {
  for (const marker of markers.splice(0)) for (const pid of findProcesses(marker)) process.kill(pid, 'SIGKILL');
});
afterAll(async () => {
  await proxied?.stop();
});

function call(method: string, path: string, body?: unknown, init: RequestInit = {}): Promise<Response> {
  return proxied!.call(method, path, body, init);
}

function json(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  return proxied!.json(method, path, body);
}

async function readUntil(events: AsyncGenerator<SseEvent>, until: (event: SseEvent) => boolean): Promise<SseEvent[]> {
  const seen: SseEvent[] = [];
  for (;;) {
    const { value, done } = await events.next();
    if (done) throw new Error(`stream ended before the expected event; saw ${JSON.stringify(seen)}`);
    seen.push(value);
    if (until(value)) return seen;
  }
}

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
const mkdirp = (path: string) => (mkdirSync(path, { recursive: true }), path);

const stdoutOf = (events: SseEvent[]) => events.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('');

const newMarker = () => {
  const suffix = randomBytes(4).toString('hex');
  markers.push(`envd-proxy-${suffix}`);
  // Assembled inside the sleeper only, so the shell's own command line does not match.
  return { marker: `envd-proxy-${suffix}`, sleeper: `export P=envd-proxy- S=${suffix}; bash -c 'exec -a "$P$S" sleep 1000'` };
};

describe('envd behind nginx, prefix /sandboxes/<id> stripped', () => {
  it('answers health, 401 and unknown routes as JSON through the prefix', async () => {
    const health = await fetch(`${nginx.url}/health`);
    expect(health.status).toBe(200);
    expect((await health.json()).status).toBe('ok');
    const unauthorised = await fetch(`${nginx.url}/commands`);
    expect(unauthorised.status).toBe(401);
    expect(await unauthorised.json()).toEqual({ message: expect.any(String) });
    expect(await json('GET', '/no-such-route')).toEqual({ status: 404, body: { message: expect.stringContaining('/no-such-route') } });
  });

  it('runs a foreground command', async () => {
    expect(await json('POST', '/commands', { cmd: 'echo hi; echo oops >&2; exit 3' })).toEqual({
      status: 200,
      body: { stdout: 'hi\n', stderr: 'oops\n', exit_code: 3, reason: 'exited' },
    });
  });

  it('streams events while the command runs, not all at the end', async () => {
    const gate = join(dir, `gate-${randomBytes(4).toString('hex')}`);
    // The command cannot end before the test has seen its first output: it waits for a file the test creates then.
    const response = await call('POST', '/commands/stream', { cmd: `echo first; while [ ! -e ${gate} ]; do sleep 0.05; done; echo second` });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = readEvents(response);
    const early = await readUntil(events, (e) => e.event === 'stdout');
    expect(stdoutOf(early)).toBe('first\n');
    expect(early.some((e) => e.event === 'exit')).toBe(false);
    writeFileSync(gate, '');
    const rest = await readUntil(events, (e) => e.event === 'exit');
    expect(stdoutOf(rest)).toBe('second\n');
    expect(rest.at(-1)!.data).toEqual({ exit_code: 0, reason: 'exited' });
  });

  it('streams output the holder writes straight to the lent socket, exact, as chunks nginx accepts', async () => {
    const gate = join(dir, `gate-${randomBytes(4).toString('hex')}`);
    const lines = 2_000_000;
    const response = await call('POST', '/commands/stream', { cmd: `echo first; while [ ! -e ${gate} ]; do sleep 0.05; done; seq 1 ${lines}` });
    const events = readEvents(response);
    const early = await readUntil(events, (e) => e.event === 'stdout');
    const { pid } = early[0]!.data as { pid: number };
    // The holder (the shell's parent) has its listening socket and envd's link; the lent client socket is a third.
    const holder = Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
    const sockets = () => readdirSync(`/proc/${holder}/fd`).filter((fd) => readlinkSync(`/proc/${holder}/fd/${fd}`).startsWith('socket:')).length;
    await waitFor(() => sockets() === 3, 5_000, 'the holder to be lent the socket');
    writeFileSync(gate, '');
    const rest = await readUntil(events, (e) => e.event === 'exit');
    expect(stdoutOf(early) + stdoutOf(rest)).toBe(`first\n${Array.from({ length: lines }, (_, i) => i + 1).join('\n')}\n`);
    expect(rest.at(-1)!.data).toEqual({ exit_code: 0, reason: 'exited' });
  });

  it('kills a streamed command when its client disconnects', async () => {
    const { marker, sleeper } = newMarker();
    const abort = new AbortController();
    const response = await call('POST', '/commands/stream', { cmd: sleeper }, { signal: abort.signal });
    const events = readEvents(response);
    await readUntil(events, (e) => e.event === 'start');
    await waitFor(() => findProcesses(marker).length === 1, 10_000, 'the sleeper to start');
    abort.abort();
    await events.return(undefined).catch(() => {});
    // nginx sees the client go, closes its upstream connection, and envd kills the command.
    await waitFor(() => findProcesses(marker).length === 0, 10_000, 'the command to be killed');
  });

  it('streams a search\'s first match through nginx while the search still runs', async () => {
    const tree = join(dir, `search-${randomBytes(4).toString('hex')}`);
    mkdirSync(tree);
    writeFileSync(join(tree, 'a.txt'), 'needle\n');
    // Seconds of work after the first match: `(a+)+$|needle` runs on V8's linear engine over 8 MiB.
    writeFileSync(join(tree, 'b.txt'), `${'a'.repeat(40)}!\n`.repeat(200_000));
    const abort = new AbortController();
    const response = await call('POST', '/files/search', { path: tree, pattern: '(a+)+$|needle' }, { signal: abort.signal });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('\n')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    expect(JSON.parse(text.split('\n')[0]!)).toMatchObject({ type: 'match', path: join(tree, 'a.txt'), line: 1 });
    // The summary has not come: nginx passed the match on as it came, not at the end.
    expect(text).not.toContain('"summary"');
    abort.abort();
    await reader.cancel().catch(() => {});
  });

  it('writes stdin to a background command, and an attacher follows it to its exit', async () => {
    const started = await json('POST', '/commands', { cmd: 'cat -n', background: true, stdin: true });
    expect(started.status).toBe(200);
    const pid = started.body.pid as number;
    const attach = await call('GET', `/commands/${pid}/stream`);
    expect(attach.status).toBe(200);
    const events = readEvents(attach);
    await readUntil(events, (e) => e.event === 'start');
    expect(await json('POST', `/commands/${pid}/stdin`, { data: 'hello\n' })).toEqual({ status: 200, body: {} });
    // Arrives through the proxy while the command still runs (its stdin is open).
    const live = await readUntil(events, (e) => e.event === 'stdout');
    expect(stdoutOf(live)).toBe('     1\thello\n');
    expect(await json('DELETE', `/commands/${pid}/stdin`)).toEqual({ status: 200, body: {} });
    const end = await readUntil(events, (e) => e.event === 'exit');
    expect(end.at(-1)!.data).toEqual({ exit_code: 0, reason: 'exited' });
    expect(await json('GET', `/commands/${pid}/wait`)).toEqual({ status: 200, body: { stdout: '     1\thello\n', stderr: '', exit_code: 0, reason: 'exited' } });
  });

  it('takes a 64 MiB upload with a Content-Length through the receiver (splice), and the client connection carries on', async () => {
    // nginx passes the Content-Length on (request buffering off), so envd splices the body and answers
    // `Connection: close`; nginx opens a new upstream connection and keeps the client's.
    const target = join(dir, 'spliced.bin');
    const bytes = randomBytes(64 * 1024 * 1024);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const pid = envd.child.pid!;
    const idle = rssBytes(pid);
    let peak = idle;
    let receiverSeen = false;
    const sampler = setInterval(() => {
      peak = Math.max(peak, rssBytes(pid));
      receiverSeen ||= findReceivers().length > 0;
    }, 20);
    const put = (path: string, body: Buffer) =>
      new Promise<{ status: number; text: string; socket: unknown }>((resolve, reject) => {
        const req = request(`${nginx.url}/files/raw?path=${encodeURIComponent(path)}`, {
          method: 'PUT',
          agent,
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': String(body.length) },
        });
        req.on('error', reject);
        req.on('response', (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode!, text, socket: req.socket }));
        });
        // Written in 1 MiB pieces, so the receiver is at work while the sampler looks.
        void (async () => {
          for (let at = 0; at < body.length; at += 1024 * 1024) if (!req.write(body.subarray(at, at + 1024 * 1024))) await new Promise((r) => req.once('drain', r));
          req.end();
        })();
      });
    try {
      const first = await put(target, bytes);
      expect(first.status).toBe(200);
      expect(JSON.parse(first.text)).toEqual({ path: target, size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') });
      expect(createHash('sha256').update(readFileSync(target)).digest('hex')).toBe(createHash('sha256').update(bytes).digest('hex'));
      // The next request goes over the same client connection to nginx.
      const second = await put(join(dir, 'small.bin'), Buffer.from('small'));
      expect(second.status).toBe(200);
      expect(second.socket).toBe(first.socket);
    } finally {
      clearInterval(sampler);
      agent.destroy();
    }
    console.log(`proxy 64 MiB spliced upload: envd RSS idle ${(idle / 2 ** 20).toFixed(1)} MiB, peak +${((peak - idle) / 2 ** 20).toFixed(1)} MiB`);
    expect(receiverSeen).toBe(true);
    expect(peak - idle).toBeLessThan(TRANSFER_RSS_BUDGET);
  });

  it('moves a whole directory as tar.gz both ways through the prefix, intact, with envd RSS bounded', async () => {
    const source = join(dir, 'tree');
    for (let i = 0; i < 200; i++) writeFileSync(join(mkdirp(join(source, `d${i % 20}`)), `f${i}.txt`), `file ${i}\n`.repeat(i + 1));
    writeFileSync(join(source, 'big.bin'), randomBytes(48 * 1024 * 1024));
    const pid = envd.child.pid!;
    const idle = rssBytes(pid);
    let peak = idle;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid))), 50);
    try {
      const got = await call('GET', `/files/archive?path=${encodeURIComponent(source)}&format=tar.gz`);
      expect(got.status).toBe(200);
      expect(got.headers.get('content-type')).toBe('application/gzip');
      const archive = Buffer.from(await got.arrayBuffer());
      const target = join(dir, 'tree-copy');
      const put = await call('PUT', `/files/archive?path=${encodeURIComponent(target)}`, undefined, { body: archive, headers: { 'content-type': 'application/gzip' } });
      expect(await put.json()).toEqual({ path: target, files: 201, bytes: expect.any(Number), sha256: createHash('sha256').update(archive).digest('hex') });
      for (const name of ['big.bin', 'd7/f147.txt']) expect(sha(readFileSync(join(target, name)))).toBe(sha(readFileSync(join(source, name))));
    } finally {
      clearInterval(sampler);
    }
    console.log(`proxy tar.gz round trip of 200 files + 48 MiB: envd RSS idle ${(idle / 2 ** 20).toFixed(1)} MiB, peak +${((peak - idle) / 2 ** 20).toFixed(1)} MiB`);
    expect(peak - idle).toBeLessThan(TRANSFER_RSS_BUDGET);
  });

  it('uploads and downloads 200 MiB intact (sha256), Range included, with envd RSS bounded', async () => {
    const target = join(dir, 'big.bin');
    const size = 200 * 1024 * 1024;
    const sent = createHash('sha256');
    let firstMiB: Buffer | undefined;
    const pid = envd.child.pid!;
    const idle = rssBytes(pid);
    let peak = idle;
    let uploadPeak = idle;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid))), 50);
    try {
      let left = size;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (left === 0) return controller.close();
          const chunk = randomBytes(Math.min(1024 * 1024, left));
          firstMiB ??= chunk;
          sent.update(chunk);
          left -= chunk.length;
          controller.enqueue(chunk);
        },
      });
      const put = await call('PUT', `/files/raw?path=${encodeURIComponent(target)}`, undefined, { body, headers: { 'content-type': 'application/octet-stream' } });
      expect(await put.json()).toMatchObject({ path: target, size });
      uploadPeak = peak;

      const got = await call('GET', `/files/raw?path=${encodeURIComponent(target)}`);
      expect(got.status).toBe(200);
      expect(got.headers.get('content-length')).toBe(String(size));
      const received = createHash('sha256');
      let length = 0;
      for await (const chunk of got.body!) {
        received.update(chunk);
        length += chunk.length;
      }
      expect(length).toBe(size);
      expect(received.digest('hex')).toBe(sent.digest('hex'));
    } finally {
      clearInterval(sampler);
    }
    const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1);
    console.log(`proxy 200 MiB round trip: envd RSS idle ${mib(idle)} MiB, peak during the upload +${mib(uploadPeak - idle)} MiB, overall +${mib(peak - idle)} MiB`);
    expect(peak - idle).toBeLessThan(TRANSFER_RSS_BUDGET);

    const range = await call('GET', `/files/raw?path=${encodeURIComponent(target)}`, undefined, { headers: { range: 'bytes=1000-1999' } });
    expect(range.status).toBe(206);
    expect(range.headers.get('content-range')).toBe(`bytes 1000-1999/${size}`);
    expect(Buffer.from(await range.arrayBuffer()).equals(firstMiB!.subarray(1000, 2000))).toBe(true);
    const past = await call('GET', `/files/raw?path=${encodeURIComponent(target)}`, undefined, { headers: { range: `bytes=${size}-` } });
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe(`bytes */${size}`);
    expect((await past.json()).message).toMatch(/outside the file/);
  }, 180_000);

  it('writes a batch', async () => {
    const a = join(dir, 'batch/a.txt');
    const b = join(dir, 'batch/b.bin');
    const written = await json('POST', '/files/batch', {
      files: [
        { path: a, data: 'A' },
        { path: b, data: 'AAEC', encoding: 'base64' },
      ],
    });
    expect(written).toEqual({ status: 200, body: { files: [{ path: a, size: 1, sha256: sha(Buffer.from('A')) }, { path: b, size: 3, sha256: sha(Buffer.from([0, 1, 2])) }] } });
    expect((await json('GET', `/files?path=${encodeURIComponent(a)}`)).body.data).toBe('A');
  });

  it('delivers a watch change event', async () => {
    const watched = join(dir, 'watched');
    expect((await json('POST', '/files/mkdir', { path: watched })).status).toBe(200);
    const abort = new AbortController();
    const response = await call('POST', '/files/watch', { path: watched }, { signal: abort.signal });
    expect(response.status).toBe(200);
    const events = readEvents(response);
    await readUntil(events, (e) => e.event === 'ready');
    const created = join(watched, 'new.txt');
    expect((await json('POST', '/files', { path: created, data: 'x' })).status).toBe(200);
    const changes = await readUntil(events, (e) => e.event === 'change' && e.data.path === created);
    expect(changes.at(-1)!.data.type).toMatch(/create|modify/);
    abort.abort();
    await events.return(undefined).catch(() => {});
  });

  it('answers a read error before the first byte as JSON, and a failure midway as a short transfer', async () => {
    const mem = await call('GET', '/files/raw?path=/proc/self/mem');
    expect(mem.status).toBe(400);
    expect(await mem.json()).toEqual({ message: '/proc/self/mem: cannot be read (EIO)' });

    const target = join(dir, 'shrinking.bin');
    const size = 64 * 1024 * 1024;
    writeFileSync(target, Buffer.alloc(size, 1));
    const response = await call('GET', `/files/raw?path=${encodeURIComponent(target)}`);
    expect(response.status).toBe(200);
    let bytes = 0;
    let failed = false;
    try {
      for await (const chunk of response.body!) {
        if (bytes === 0) truncateSync(target, 1024 * 1024);
        bytes += chunk.length;
      }
    } catch {
      failed = true;
    }
    expect(failed).toBe(true);
    expect(bytes).toBeLessThan(size);
  });
});

describe('oversized bodies through the proxy: ten in a row, each a 413 { message }', () => {
  const tooLarge = { status: 413, body: { message: expect.any(String) } };

  it('JSON bodies over 10 MiB sent with fetch', async () => {
    for (let i = 0; i < 10; i++) expect(await postJsonOverLimit(nginx.url, token, join(dir, 'j.txt')), `try ${i}`).toEqual(tooLarge);
  });

  it('JSON bodies over 10 MiB from a client that writes the whole body before reading', async () => {
    const length = JSON_BODY_LIMIT + 1024 * 1024;
    for (let i = 0; i < 10; i++) expect(await sendWholeThenRead(nginx.url, jsonHead(nginx.url, token, length), length), `try ${i}`).toEqual(tooLarge);
  });

  it('uploads declaring over 500 MiB and sending real bytes', async () => {
    for (let i = 0; i < 10; i++) expect(await putDeclaredOverLimit(nginx.url, token, join(dir, 'declared.bin')), `try ${i}`).toEqual(tooLarge);
  });

  it('chunked uploads passing 500 MiB, leaving no temp file', async () => {
    for (let i = 0; i < 10; i++) expect(await putChunkedOverLimit(nginx.url, token, join(dir, 'chunked.bin')), `try ${i}`).toEqual(tooLarge);
    await waitFor(() => readdirSync(dir).filter(isTempName).length === 0, 5_000, 'temps removed');
  }, 300_000);

  it('left nginx nothing to report as a broken upstream', () => {
    expect(nginx.errorLog()).not.toMatch(/Broken pipe|Connection reset by peer|upstream prematurely closed connection while reading response header|invalid chunked response/);
  });
});

