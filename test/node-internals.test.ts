// Node's internals that envd relies on (src/node-internals.ts) are checked at
// start-up; one that does not behave as assumed is logged once and its feature
// takes the public path. Here each is made to fail on a real dist/envd
// (ENVD_DISTRUST_NODE_INTERNALS), and the public path must still deliver every
// byte: a 17 MB stream of output and a 24 MiB upload, compared by sha256.
// Today's Node passes every check: without the switch the fast paths are taken,
// which is what makes the "not taken" assertions below able to fail.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkNodeInternals, NODE_INTERNALS, trusts, type NodeInternal } from '../src/node-internals.js';
import { commandUser } from './helpers/command-user.js';
import { startEnvdProcess, waitFor, type EnvdProcess } from './helpers/proc.js';
import { readEvents } from './helpers/sse.js';

const token = randomBytes(16).toString('hex');
const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');

/** `seq 1 N`: 17.4 MB of output, every line different, so a lost, repeated or reordered byte shows. */
const N = 2_500_000;
const EXPECTED_OUTPUT = Array.from({ length: N }, (_, i) => `${i + 1}\n`).join('');
const UPLOAD = randomBytes(24 * 1024 * 1024 + 5);

/** The holder of a command (its shell's parent), and how many sockets it has: 2 of its own, a lent one is a third. */
const holderOf = (shellPid: number) => Number(readFileSync(`/proc/${shellPid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
const socketCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).filter((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')).length;

let user: Awaited<ReturnType<typeof commandUser>>;
let dir: string;
beforeAll(async () => {
  user = await commandUser();
  dir = mkdtempSync(join(tmpdir(), 'envd-internals-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  user?.remove();
});

/**
 * Attaches alone to a command that prints `seq` once told to and then waits for its stdin to close,
 * so the holder's sockets can be counted meanwhile: whether the stream's socket was lent. Resolves
 * with the text and that.
 */
async function streamSeq(envd: EnvdProcess): Promise<{ text: string; lent: boolean }> {
  const call = (method: string, path: string, body?: unknown) =>
    fetch(`${envd.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const started = await call('POST', '/commands', { cmd: `read go; seq 1 ${N}; cat`, background: true, stdin: true });
  const { pid } = (await started.json()) as { pid: number };
  const response = await call('GET', `/commands/${pid}/stream`);
  expect(response.status).toBe(200);
  let text = '';
  let lent: boolean | undefined;
  for await (const event of readEvents(response)) {
    if (event.event === 'start') expect((await call('POST', `/commands/${pid}/stdin`, { data: 'go\n' })).status).toBe(200);
    if (event.event === 'stdout') text += (event.data as { data: string }).data;
    // All output is in: the command waits, and a lone client's socket stays lent meanwhile.
    if (text.length === EXPECTED_OUTPUT.length && lent === undefined) {
      lent = socketCount(holderOf(pid)) === 3;
      expect((await call('DELETE', `/commands/${pid}/stdin`)).status).toBe(200);
    }
    if (event.event === 'exit') expect(event.data).toMatchObject({ exit_code: 0 });
  }
  return { text, lent: lent ?? false };
}

/** PUT /files/raw of UPLOAD with node:http; resolves with the status and whether envd closed the connection (a spliced body). */
function upload(envd: EnvdProcess, target: string): Promise<{ status: number; spliced: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request(`${envd.url}/files/raw?path=${encodeURIComponent(target)}&username=root`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': String(UPLOAD.length) },
    });
    req.on('error', reject);
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode!, spliced: res.headers.connection === 'close' }));
    });
    req.end(UPLOAD);
  });
}

/** The log lines saying an internal does not behave as assumed, by name. */
function distrustLogged(envd: EnvdProcess): string[] {
  return envd.lines.flatMap((line) => {
    let entry: { internal?: string; msg?: string };
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      return [];
    }
    return entry.msg?.startsWith('a Node internal does not behave as envd assumes') ? [entry.internal!] : [];
  });
}

it("this Node passes every check of envd's assumptions", async () => {
  await checkNodeInternals();
  for (const name of Object.keys(NODE_INTERNALS) as NodeInternal[]) expect(trusts(name), name).toBe(true);
});

const CASES: { distrust: string; logged: NodeInternal[]; lends: boolean; splices: boolean }[] = [
  { distrust: '', logged: [], lends: true, splices: true },
  { distrust: 'socket-fd', logged: ['socket-fd'], lends: false, splices: false },
  { distrust: 'chunked-encoding', logged: ['chunked-encoding'], lends: false, splices: true },
  { distrust: 'request-read', logged: ['request-read'], lends: true, splices: false },
  { distrust: 'onread-buffer', logged: ['onread-buffer'], lends: true, splices: true },
  { distrust: 'all', logged: ['socket-fd', 'chunked-encoding', 'request-read', 'onread-buffer'], lends: false, splices: false },
];

describe.each(CASES)('dist/envd with ENVD_DISTRUST_NODE_INTERNALS=$distrust', ({ distrust, logged, lends, splices }) => {
  let envd: EnvdProcess;
  beforeAll(async () => {
    envd = await startEnvdProcess(['--default-user', user.user.name], { ENVD_ACCESS_TOKEN: token, ENVD_DISTRUST_NODE_INTERNALS: distrust });
  });
  afterAll(async () => {
    await envd?.stop();
  });

  it(`logs ${logged.length ? logged.join(', ') : 'nothing'} once, at start-up`, () => {
    expect(distrustLogged(envd).sort()).toEqual([...logged].sort());
  });

  it(`streams every byte of the output (${lends ? 'the holder writes it on the lent socket' : 'envd writes it, no socket lent'})`, async () => {
    const { text, lent } = await streamSeq(envd);
    expect(text.length).toBe(EXPECTED_OUTPUT.length);
    expect(sha256(text)).toBe(sha256(EXPECTED_OUTPUT));
    expect(lent).toBe(lends);
  });

  it(`receives every byte of an upload (${splices ? 'spliced by the holder' : 'through the HTTP parser'})`, async () => {
    const target = join(dir, `upload-${distrust || 'none'}.bin`);
    const result = await upload(envd, target);
    expect(result.status).toBe(200);
    expect(result.spliced).toBe(splices);
    await waitFor(() => readFileSync(target).length === UPLOAD.length, 5_000, 'the upload to be in place');
    expect(sha256(readFileSync(target))).toBe(sha256(UPLOAD));
  });
});
