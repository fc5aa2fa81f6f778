// Issue 44: encoding "base64" on POST /commands/stream and attach sends each
// chunk's raw bytes, so binary output arrives byte-exact; ids resume as in text.
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { collectEvents, readEvents, type SseEvent } from '../helpers/sse.js';

const fixture = useCommandServer();
let dir: string;
let file: string;
let bytes: Buffer;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-stream-bytes-'));
  chmodSync(dir, 0o755);
  file = join(dir, 'random.bin');
  // Random bytes: invalid UTF-8 everywhere, characters split across every read.
  bytes = randomBytes(3 * 1024 * 1024 + 17);
  writeFileSync(file, bytes, { mode: 0o644 });
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const sha = (data: Buffer) => createHash('sha256').update(data).digest('hex');
const bytesOf = (events: SseEvent[], stream = 'stdout') => Buffer.concat(events.filter((e) => e.event === stream).map((e) => Buffer.from(e.data.data, 'base64')));

describe('output as raw bytes (encoding base64)', () => {
  it('POST /commands/stream with encoding base64 gives a binary file byte-exact, stdout and stderr apart', async () => {
    const response = await fixture.server.call('POST', '/commands/stream', { cmd: `cat ${file}; printf '\\377\\376' >&2`, encoding: 'base64' });
    expect(response.status).toBe(200);
    const events = await collectEvents(response, { ids: true });
    expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 0 } });
    expect(sha(bytesOf(events))).toBe(sha(bytes));
    expect(bytesOf(events, 'stderr')).toEqual(Buffer.from([0xff, 0xfe]));
    // The last id counts every byte of both streams, as in text.
    expect(events.filter((e) => e.id).at(-1)!.id).toBe(`${bytes.length}-2`);
  });

  it('the default stays text events', async () => {
    const events = await collectEvents(await fixture.server.call('POST', '/commands/stream', { cmd: "printf 'h\\303\\251'" }));
    expect(events.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('')).toBe('hé');
  });

  it('attach with ?encoding=base64 replays and follows byte-exact, and resumes from any id (Last-Event-ID or ?from=)', async () => {
    const { body } = await fixture.server.json('POST', '/commands', { cmd: `sleep 0.3; cat ${file}; sleep 0.2; head -c 100000 ${file}`, background: true });
    const pid = body.pid as number;
    const all = await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream?encoding=base64`), { ids: true });
    const want = Buffer.concat([bytes, bytes.subarray(0, 100000)]);
    expect(sha(bytesOf(all))).toBe(sha(want));
    const output = all.filter((e) => e.event === 'stdout');
    for (const cut of [output[0]!, output[Math.floor(output.length / 2)]!, output.at(-1)!]) {
      const at = Number(cut.id!.split('-')[0]);
      const byQuery = await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream?encoding=base64&from=${cut.id}`));
      expect(sha(bytesOf(byQuery))).toBe(sha(want.subarray(at)));
      const byHeader = await collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream?encoding=base64`, undefined, { headers: { 'last-event-id': cut.id! } }));
      expect(sha(bytesOf(byHeader))).toBe(sha(want.subarray(at)));
    }
  });

  it('a bytes follower joining a text follower of a running command: each gets all of it, in its own encoding', async () => {
    const { body } = await fixture.server.json('POST', '/commands', { cmd: 'for i in $(seq 1 40); do echo "line $i"; sleep 0.02; done', background: true });
    const pid = body.pid as number;
    const want = Array.from({ length: 40 }, (_, i) => `line ${i + 1}\n`).join('');
    const text = collectEvents(await fixture.server.call('GET', `/commands/${pid}/stream`));
    // Join once the text follower is live (the holder then sends TEXT, or writes to its socket itself).
    const events = readEvents(await fixture.server.call('GET', `/commands/${pid}/stream?encoding=base64`));
    const got: SseEvent[] = [];
    for await (const event of events) if (event.event !== ':') got.push(event);
    expect(bytesOf(got).toString()).toBe(want);
    expect((await text).filter((e) => e.event === 'stdout').map((e) => e.data.data).join('')).toBe(want);
  });

  it('an unknown encoding is a 400 naming the choices', async () => {
    const { status, body } = await fixture.server.json('POST', '/commands/stream', { cmd: 'true', encoding: 'hex' });
    expect(status).toBe(400);
    expect(body.message).toMatch(/encoding/);
    const attach = await fixture.server.json('GET', '/commands/1/stream?encoding=hex');
    expect(attach.status).toBe(400);
  });
});

describe('binary stdin (POST /commands/{pid}/stdin)', () => {
  const startCat = async () => (await fixture.server.json('POST', '/commands', { cmd: 'sha256sum', background: true, stdin: true })).body.pid as number;
  const digestOf = async (pid: number) => {
    expect((await fixture.server.call('DELETE', `/commands/${pid}/stdin`)).status).toBe(200);
    return ((await fixture.server.json('GET', `/commands/${pid}/wait`)).body.stdout as string).split(' ')[0];
  };

  it('takes bytes as data_base64 and as an application/octet-stream body, exactly', async () => {
    const part = randomBytes(300_000);
    const pid = await startCat();
    expect((await fixture.server.json('POST', `/commands/${pid}/stdin`, { data_base64: part.toString('base64') })).status).toBe(200);
    const raw = await fixture.server.call('POST', `/commands/${pid}/stdin`, undefined, { body: part, headers: { 'content-type': 'application/octet-stream' } });
    expect(raw.status).toBe(200);
    expect(await raw.json()).toEqual({});
    // Text still works, and a character split between two writes arrives whole.
    const e = Buffer.from('é');
    await fixture.server.call('POST', `/commands/${pid}/stdin`, undefined, { body: e.subarray(0, 1), headers: { 'content-type': 'application/octet-stream' } });
    await fixture.server.call('POST', `/commands/${pid}/stdin`, undefined, { body: e.subarray(1), headers: { 'content-type': 'application/octet-stream' } });
    expect((await fixture.server.json('POST', `/commands/${pid}/stdin`, { data: 'ok' })).status).toBe(200);
    expect(await digestOf(pid)).toBe(sha(Buffer.concat([part, part, e, Buffer.from('ok')])));
  });

  it('answers 400 for both fields, neither, or base64 that is not; 413 past the limit', async () => {
    const pid = await startCat();
    for (const body of [{ data: 'a', data_base64: 'YQ==' }, {}, { data_base64: 'YQ' }, { data_base64: 'not base64!' }]) {
      const { status, body: answer } = await fixture.server.json('POST', `/commands/${pid}/stdin`, body);
      expect(status, JSON.stringify(body)).toBe(400);
      expect(answer.message).toMatch(/data|base64/);
    }
    const big = await fixture.server.call('POST', `/commands/${pid}/stdin`, undefined, { body: Buffer.alloc(10 * 1024 * 1024 + 1), headers: { 'content-type': 'application/octet-stream' } });
    expect(big.status).toBe(413);
    // Raw bytes where a route wants JSON: a 400, not a 500.
    const wrong = await fixture.server.call('POST', '/commands', undefined, { body: Buffer.from('{}'), headers: { 'content-type': 'application/octet-stream' } });
    expect(wrong.status).toBe(400);
    expect(await digestOf(pid)).toBe(sha(Buffer.alloc(0)));
  });
});
