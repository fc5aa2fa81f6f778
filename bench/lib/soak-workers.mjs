// The workers of the soak (issue 45), each a loop of one kind of client
// work that checks every answer and counts operations and errors: the six of
// the issue (foreground commands, background commands (waited for or
// DELETEd), streams (a third cut mid-way), transfers with archive round
// trips, watches opened and closed while files change, terminal commands),
// and the three it adds as they landed: shell sessions, services, searches.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { postJson, readSse, send } from './client.mjs';

const MIB = 1024 * 1024;
/** How long one operation may take before the soak calls it hung (a loaded 2-core machine included). */
const OPERATION_DEADLINE_MS = 60_000;

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** The text `seq 1 n` prints. */
const seqText = (n) => Array.from({ length: n }, (_, i) => `${i + 1}\n`).join('');

/** Fails an operation that does not finish in time, so a hang is an error and not a stalled soak. */
function withDeadline(what, promise, onTimeout = () => {}) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new Error(`${what}: no answer within ${OPERATION_DEADLINE_MS / 1000} s`));
    }, OPERATION_DEADLINE_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function expectJson(envd, method, path, body, status = 200) {
  const reply = await send(envd, method, path, { body });
  if (reply.status !== status) throw new Error(`${method} ${path.split('?')[0]} answered ${reply.status}: ${reply.body.slice(0, 200)}`);
  return reply.body ? JSON.parse(reply.body) : undefined;
}

function expectResult(what, result, stdout) {
  if (result.exit_code !== 0) throw new Error(`${what}: exit_code ${result.exit_code} (${JSON.stringify(result).slice(0, 200)})`);
  if (stdout !== undefined && result.stdout !== stdout) throw new Error(`${what}: stdout of ${result.stdout.length} chars, expected ${stdout.length}`);
}

/** Foreground commands with ~100 KiB of output. */
async function foreground({ envd, user }) {
  const result = await postJson(envd, '/commands', { cmd: 'seq 1 20000; echo done >&2', user });
  expectResult('foreground', result, seqText(20000));
  if (result.stderr !== 'done\n') throw new Error(`foreground: stderr ${JSON.stringify(result.stderr)}`);
}

/** Background commands, waited for; every fourth is DELETEd while it runs instead. */
async function background({ envd, user }, round) {
  if (round % 4 === 3) {
    const { pid } = await postJson(envd, '/commands', { cmd: 'seq 1 5000; sleep 30', background: true, user });
    await sleep(20);
    const reply = await expectJson(envd, 'DELETE', `/commands/${pid}`);
    if (reply.killed !== true) throw new Error(`background: DELETE of a running command said ${JSON.stringify(reply)}`);
    return;
  }
  const { pid } = await postJson(envd, '/commands', { cmd: 'seq 1 5000; sleep 0.05', background: true, user });
  expectResult('background wait', await expectJson(envd, 'GET', `/commands/${pid}/wait`), seqText(5000));
}

/**
 * Streams, a fast big one and a slow small one in turn; every third is cut by
 * the client after its first output event. Every other one must end with its
 * `exit` event after all its output: an end without it is the soak's error.
 */
async function stream({ envd, user }, round) {
  const slow = round % 2 === 1;
  const lines = slow ? 40 : 20000;
  const cmd = slow ? `for i in $(seq 1 ${lines}); do echo $i; sleep 0.01; done` : `seq 1 ${lines}`;
  const cut = round % 3 === 2;
  const res = await send(envd, 'POST', '/commands/stream', { body: { cmd, user }, read: false });
  if (res.statusCode !== 200) throw new Error(`stream answered ${res.statusCode}`);
  let stdout = '';
  let exit;
  let outputEvents = 0;
  let errorEvent;
  let pid;
  const done = readSse(res, (event, data) => {
    if (event === 'start') pid = JSON.parse(data).pid;
    else if (event === 'stdout') {
      stdout += JSON.parse(data).data;
      if (cut && ++outputEvents === 1) res.destroy();
    } else if (event === 'exit') exit = JSON.parse(data);
    else if (event === 'error') errorEvent = data;
  });
  try {
    await withDeadline('stream', done, () => res.destroy());
  } catch (error) {
    if (cut && outputEvents >= 1) return; // the client's own cut
    throw new Error(`stream of pid ${pid} ended without its exit event (${error.message}; ${stdout.length} chars of output, ${slow ? 'slow' : 'fast'})`);
  }
  if (errorEvent) throw new Error(`stream: error event ${errorEvent}`);
  if (cut && outputEvents >= 1 && !exit) return;
  if (!exit) throw new Error(`stream of pid ${pid} ended without its exit event (the response ended; ${stdout.length} chars of output, ${slow ? 'slow' : 'fast'})`);
  expectResult('stream', exit);
  if (stdout !== seqText(lines)) throw new Error(`stream: ${stdout.length} chars of output, expected ${seqText(lines).length}`);
}

function upload(envd, path, bytes) {
  const body = Readable.from([bytes]);
  return send(envd, 'PUT', `/files/raw?path=${encodeURIComponent(path)}`, {
    body,
    headers: { 'content-type': 'application/octet-stream', 'content-length': bytes.length },
  });
}

async function download(envd, path) {
  const res = await send(envd, 'GET', path, { read: false });
  const chunks = [];
  for await (const chunk of res) chunks.push(chunk);
  if (res.statusCode !== 200) throw new Error(`GET ${path.split('?')[0]} answered ${res.statusCode}`);
  return Buffer.concat(chunks);
}

/** 1-4 MiB uploads and downloads over three files; every third round, the directory through an archive and back. */
async function transfers({ envd, dir }, round) {
  const files = join(dir, 'transfers');
  const bytes = randomBytes(MIB + Math.floor(Math.random() * 3 * MIB));
  const path = join(files, `file-${round % 3}.bin`);
  const put = await upload(envd, path, bytes);
  if (put.status !== 200) throw new Error(`upload answered ${put.status}: ${put.body.slice(0, 200)}`);
  const got = await download(envd, `/files/raw?path=${encodeURIComponent(path)}`);
  if (sha256(got) !== sha256(bytes)) throw new Error(`download of ${bytes.length} bytes gave ${got.length} other bytes`);
  if (round % 3 !== 2) return;
  const tar = await download(envd, `/files/archive?path=${encodeURIComponent(files)}&format=tar`);
  const target = join(dir, 'unpacked');
  const put2 = await send(envd, 'PUT', `/files/archive?path=${encodeURIComponent(target)}&mode=replace`, {
    body: Readable.from([tar]),
    headers: { 'content-type': 'application/x-tar', 'content-length': tar.length },
  });
  if (put2.status !== 200) throw new Error(`archive upload answered ${put2.status}: ${put2.body.slice(0, 200)}`);
  const { files: count } = JSON.parse(put2.body);
  if (count !== 3) throw new Error(`archive round trip extracted ${count} files, expected 3`);
}

/** A watch opened, five files written and seen, then closed. */
async function watch({ envd, dir }, round) {
  const watched = join(dir, 'watched');
  const res = await send(envd, 'POST', '/files/watch', { body: { path: watched }, read: false });
  if (res.statusCode !== 200) throw new Error(`watch answered ${res.statusCode}`);
  const names = Array.from({ length: 5 }, (_, i) => join(watched, `f-${round}-${i}`));
  const seen = new Set();
  let ready;
  const isReady = new Promise((resolve) => (ready = resolve));
  let allSeen;
  const complete = new Promise((resolve) => (allSeen = resolve));
  const ended = readSse(res, (event, data) => {
    if (event === 'ready') ready();
    else if (event === 'change') {
      seen.add(JSON.parse(data).path);
      if (names.every((name) => seen.has(name))) allSeen();
    } else if (event === 'error') errorEvent = data;
  });
  let errorEvent;
  const endedEarly = ended.then(() => {
    throw new Error(`watch: the stream ended while open${errorEvent ? ` after an error event ${errorEvent}` : ''}`);
  });
  try {
    await withDeadline('watch ready', Promise.race([isReady, endedEarly]));
    for (const name of names) await expectJson(envd, 'POST', '/files', { path: name, data: `round ${round}\n` });
    await withDeadline('watch events', Promise.race([complete, endedEarly]));
    for (const name of names) await expectJson(envd, 'DELETE', `/files?path=${encodeURIComponent(name)}`);
  } finally {
    res.destroy();
    ended.catch(() => {});
    endedEarly.catch(() => {});
  }
}

/** Terminal commands: a foreground one that checks its tty, and a background one typed into. */
async function terminal({ envd, user }, round) {
  const pty = { cols: 80, rows: 24 };
  if (round % 2 === 0) {
    const result = await postJson(envd, '/commands', { cmd: 'test -t 1 && echo "tty $((6*7))"', pty, user });
    expectResult('terminal', result, 'tty 42\r\n');
    return;
  }
  const { pid } = await postJson(envd, '/commands', { cmd: 'read line; echo "got:$line"', pty, background: true, user });
  await expectJson(envd, 'POST', `/commands/${pid}/stdin`, { data: 'hi\r' });
  const result = await expectJson(envd, 'GET', `/commands/${pid}/wait`);
  if (result.exit_code !== 0 || !result.stdout.includes('got:hi')) throw new Error(`terminal stdin: ${JSON.stringify(result).slice(0, 200)}`);
}

/** A shell session: made, five commands that carry a counter from one to the next, ended. */
async function sessions({ envd, user }) {
  const { id } = await expectJson(envd, 'POST', '/sessions', user ? { user } : {}, 201);
  try {
    for (let n = 1; n <= 5; n++) {
      const result = await expectJson(envd, 'POST', `/sessions/${id}/commands`, { cmd: 'n=$((${n:-0}+1)); echo "$n"' });
      expectResult('session command', result, `${n}\n`);
    }
  } finally {
    const ended = await expectJson(envd, 'DELETE', `/sessions/${id}`);
    if (ended.ended !== true) throw new Error(`session: DELETE said ${JSON.stringify(ended)}`);
  }
}

/** A service: defined with a log readiness check, awaited through its run's ready long-poll, deleted. */
async function services({ envd, user }, round) {
  const name = `soak-${round % 2}`;
  const record = await expectJson(envd, 'PUT', `/services/${name}`, { cmd: `echo "up ${round}"; exec sleep 600`, restart: 'no', ready: { log: `^up ${round}$` }, ...(user ? { user } : {}) }, 201);
  try {
    if (typeof record.pid !== 'number') throw new Error(`service: no run after PUT: ${JSON.stringify(record).slice(0, 200)}`);
    await expectJson(envd, 'GET', `/commands/${record.pid}/ready?timeout_ms=${OPERATION_DEADLINE_MS / 2}`);
  } finally {
    const deleted = await expectJson(envd, 'DELETE', `/services/${name}`);
    if (deleted.deleted !== true) throw new Error(`service: DELETE said ${JSON.stringify(deleted)}`);
  }
}

const SEARCH_FILES = 300;
const SEARCH_NEEDLES = 7;

/** Content search for a literal in a tree of SEARCH_FILES files, and every other round a find over it. */
async function search({ envd, dir }, round) {
  const root = join(dir, 'search');
  const needle = round % SEARCH_NEEDLES;
  const reply = await send(envd, 'POST', '/files/search', { body: { path: root, pattern: `needle-${needle}`, literal: true } });
  if (reply.status !== 200) throw new Error(`search answered ${reply.status}: ${reply.body.slice(0, 200)}`);
  const lines = reply.body.trim().split('\n').map((line) => JSON.parse(line));
  const summary = lines.at(-1);
  const expected = Array.from({ length: SEARCH_FILES }, (_, i) => i).filter((i) => i % SEARCH_NEEDLES === needle).length;
  if (summary?.type !== 'summary' || summary.matches !== expected || lines.length !== expected + 1) {
    throw new Error(`search for needle-${needle}: ${lines.length - 1} matches and ${JSON.stringify(summary)}, expected ${expected}`);
  }
  if (round % 2 === 1) return;
  const found = await expectJson(envd, 'GET', `/files/find?path=${encodeURIComponent(root)}&glob=${encodeURIComponent('**/*.txt')}`);
  if (found.entries.length !== SEARCH_FILES || found.truncated) throw new Error(`find: ${found.entries.length} entries, expected ${SEARCH_FILES}`);
}

/** What the search worker searches: SEARCH_FILES small files in ten directories, file i naming needle-(i mod SEARCH_NEEDLES) once. */
function searchTree(i) {
  return { path: join('search', `d${i % 10}`, `f${i}.txt`), text: `line one of ${i}\nneedle-${i % SEARCH_NEEDLES} is here\nline three\n` };
}

export const WORKERS = { foreground, background, stream, transfers, watch, terminal, sessions, services, search };

/**
 * The kinds added to the issue's six pause this long between their operations: they are in the mix,
 * but its load stays the six-worker load the budgets are stated for. At full speed beside the six
 * they added a saturating load of their own, and CI's 5-minute soak peaked at idle + 71.7 MiB
 * (the six alone: +51 to +61 MiB in earlier runs).
 */
const ADDED_KIND_PACE_MS = { sessions: 250, services: 250, search: 250 };

/** The directories the workers use under `dir`, created before the load starts. */
export function prepareWorkDir(dir) {
  for (const sub of ['transfers', 'watched', ...Array.from({ length: 10 }, (_, i) => join('search', `d${i}`))]) mkdirSync(join(dir, sub), { recursive: true });
  for (let i = 0; i < 3; i++) writeFileSync(join(dir, 'transfers', `file-${i}.bin`), randomBytes(MIB));
  for (let i = 0; i < SEARCH_FILES; i++) writeFileSync(join(dir, searchTree(i).path), searchTree(i).text);
}

/** The same directories on envd's own machine (a guest's), made through envd as the workers' files are. */
export async function prepareRemoteWorkDir(envd, dir) {
  await expectJson(envd, 'POST', '/files/mkdir', { path: join(dir, 'watched') });
  for (let i = 0; i < 3; i++) {
    const put = await upload(envd, join(dir, 'transfers', `file-${i}.bin`), randomBytes(MIB));
    if (put.status !== 200) throw new Error(`preparing ${dir}: upload answered ${put.status}: ${put.body.slice(0, 200)}`);
  }
  for (let i = 0; i < SEARCH_FILES; i++) await expectJson(envd, 'POST', '/files', { path: join(dir, searchTree(i).path), data: searchTree(i).text });
}

/**
 * Runs every worker in a loop until `stopAt` (performance.now()); calls
 * `record(null)` after each operation that succeeded and `record(message)`
 * after each that failed. `paceMs` pauses each worker between its operations.
 */
export function runWorkers(context, stopAt, record, { streams = 1, paceMs = 0 } = {}) {
  // More stream workers than one (soak --streams N) to hunt a rare end of a stream in the mix.
  const workers = [...Object.entries(WORKERS), ...Array.from({ length: streams - 1 }, () => ['stream', stream])];
  return Promise.all(
    workers.map(async ([name, work]) => {
      for (let round = 0; performance.now() < stopAt; round++) {
        try {
          await withDeadline(name, work(context, round));
          record(null);
          // A guest under TCG has a fraction of this machine's CPU: a pause keeps the workers from saturating it (soak --pace-ms).
          const pause = Math.max(paceMs, ADDED_KIND_PACE_MS[name] ?? 0);
          if (pause > 0) await sleep(pause);
        } catch (error) {
          record(`${name}: ${error.message}`);
          await sleep(100);
        }
      }
    }),
  );
}
