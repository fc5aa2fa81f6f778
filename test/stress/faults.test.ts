import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, writeFileSync, existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProcesses, waitFor } from '../helpers/proc.js';
import { readEvents } from '../helpers/sse.js';
import { MiB, report, settleFds, startStressEnvd, type StressEnvd } from './harness.js';

const isRoot = process.getuid?.() === 0;
let target: StressEnvd;
beforeAll(async () => {
  target = await startStressEnvd();
});
afterAll(async () => target?.stop());

/** Files left anywhere below dir that look like envd's temporaries. */
function leftoverTemps(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (/tmp|envd-/.test(entry.name) && entry.isFile()) found.push(`${entry.parentPath}/${entry.name}`);
  }
  return found;
}

async function readOneChunkThenCancel(response: Response): Promise<void> {
  const reader = response.body!.getReader();
  await reader.read();
  await reader.cancel();
}

/** Starts a raw upload, sends part of the body, then cuts the connection. */
function abortedUpload(url: string, token: string, path: string, sent: number): Promise<void> {
  return new Promise((resolve) => {
    const req = request(`${url}/files/raw?path=${encodeURIComponent(path)}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': String(sent * 4) },
    });
    req.on('error', () => resolve());
    req.on('response', () => resolve());
    req.write(Buffer.alloc(sent, 7), () => setTimeout(() => { req.destroy(); resolve(); }, 100));
  });
}

describe('faults', () => {
  it('survives clients that abort uploads, downloads, streams, attaches and watches mid-way', async () => {
    // envd's holder spawner (its two pipes) starts with the first command and stays: part of the baseline, not a leak.
    expect((await (await target.call('POST', '/commands', { cmd: 'true' })).json()).exit_code).toBe(0);
    const fdsBefore = target.fds();
    const marker = `abort-${randomBytes(4).toString('hex')}`;
    const file = `${target.dir}/abort/target.bin`;
    mkdirSync(`${target.dir}/abort`, { recursive: true });
    writeFileSync(file, 'old content');
    writeFileSync(`${target.dir}/abort/big.bin`, Buffer.alloc(64 * MiB, 1));
    let aborted = 0;
    for (let round = 0; round < 5; round++) {
      await abortedUpload(target.url, target.token, file, 4 * MiB);
      const download = await target.call('GET', `/files/raw?path=${target.dir}/abort/big.bin`);
      await readOneChunkThenCancel(download);
      const stream = new AbortController();
      const streamed = await target.call('POST', '/commands/stream', { cmd: `yes ${marker}` }, { signal: stream.signal });
      await streamed.body!.getReader().read();
      stream.abort();
      const { pid } = await (await target.call('POST', '/commands', { cmd: `yes ${marker}-bg`, background: true })).json();
      const attach = new AbortController();
      const attached = await target.call('GET', `/commands/${pid}/stream`, undefined, { signal: attach.signal });
      await attached.body!.getReader().read();
      attach.abort();
      expect((await (await target.call('DELETE', `/commands/${pid}`)).json()).killed).toBe(true);
      const watch = new AbortController();
      const watched = await target.call('POST', '/files/watch', { path: `${target.dir}/abort` }, { signal: watch.signal });
      await watched.body!.getReader().read();
      watch.abort();
      aborted += 5;
    }
    expect(readFileSync(file, 'utf8')).toBe('old content');
    await waitFor(() => leftoverTemps(`${target.dir}/abort`).length === 0, 5_000, 'temps removed').catch(() => undefined);
    expect(leftoverTemps(`${target.dir}/abort`)).toEqual([]);
    await waitFor(() => findProcesses(marker).length === 0, 5_000, 'aborted commands killed');
    const fdsAfter = await settleFds(target, fdsBefore);
    report('client aborts', { aborted, fdsBefore, fdsAfter });
    expect(fdsAfter).toBeLessThanOrEqual(fdsBefore + 2);
    expect((await target.call('GET', '/health')).status).toBe(200);
  });

  it.skipIf(!isRoot)('answers disk full with 507 and leaves nothing partial (root: small tmpfs)', async () => {
    const mount = `${target.dir}/full`;
    mkdirSync(mount);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mount]);
    try {
      writeFileSync(`${mount}/keep.txt`, 'keep');
      const upload = await target.call('PUT', `/files/raw?path=${mount}/keep.txt`, undefined, { body: Buffer.alloc(2 * MiB, 1), headers: { 'content-type': 'application/octet-stream' } });
      expect(upload.status).toBe(507);
      expect(typeof (await upload.json()).message).toBe('string');
      const batch = await target.call('POST', '/files/batch', { files: [{ path: `${mount}/a.txt`, data: 'a' }, { path: `${mount}/b.txt`, data: 'b'.repeat(2 * MiB) }] });
      expect(batch.status).toBe(507);
      expect(readFileSync(`${mount}/keep.txt`, 'utf8')).toBe('keep');
      expect(readdirSync(mount)).toEqual(['keep.txt']);
      report('disk full', { upload: upload.status, batch: batch.status, left: readdirSync(mount).length });
    } finally {
      spawnSync('umount', [mount]);
    }
  });
  if (!isRoot) console.warn('[stress] SKIPPED disk-full scenario: it mounts a tmpfs and needs root');

  it('answers fd exhaustion with a clear error and recovers', async () => {
    const limit = target.fds() + 40;
    const soft = execFileSync('prlimit', ['--pid', String(target.pid), '--nofile', '--output=SOFT', '--noheadings'], { encoding: 'utf8' }).trim();
    // Only the soft limit moves, so it can be put back.
    execFileSync('prlimit', ['--pid', String(target.pid), `--nofile=${limit}:`]);
    const statuses = new Map<string, number>();
    const open: AbortController[] = [];
    const pids: number[] = [];
    for (let i = 0; i < 60; i++) {
      try {
        const response = await target.call('POST', '/commands', { cmd: 'sleep 30', background: true }, { signal: AbortSignal.timeout(10_000) });
        statuses.set(String(response.status), (statuses.get(String(response.status)) ?? 0) + 1);
        const body = await response.json();
        if (response.status === 200) pids.push(body.pid);
        else expect(typeof body.message).toBe('string');
        expect(response.status).not.toBe(500);
        if (response.status !== 200) {
          const watch = new AbortController();
          open.push(watch);
          const watched = await target.call('POST', '/files/watch', { path: target.dir }, { signal: watch.signal }).catch(() => undefined);
          if (watched && watched.status !== 200) {
            expect(watched.status).not.toBe(500);
            expect(typeof (await watched.json()).message).toBe('string');
          }
          break;
        }
      } catch {
        statuses.set('connection error', (statuses.get('connection error') ?? 0) + 1);
        break;
      }
    }
    for (const controller of open) controller.abort();
    for (const pid of pids) await target.call('DELETE', `/commands/${pid}`).catch(() => undefined);
    execFileSync('prlimit', ['--pid', String(target.pid), `--nofile=${soft}:`]);
    const after = await target.call('POST', '/commands', { cmd: 'echo recovered' });
    report('fd exhaustion', { limit, started: pids.length, statuses: JSON.stringify(Object.fromEntries(statuses)) });
    expect([...statuses.keys()].some((s) => s !== '200')).toBe(true);
    expect((await after.json()).stdout).toBe('recovered\n');
  });

  it.skipIf(!isRoot)('answers exhausted inotify limits with a clear error, then watches again once they are raised', async () => {
    // fs.inotify.max_user_watches is system-wide: lowered for a moment only,
    // in a suite that runs alone, and put back whatever happens.
    const limitFile = '/proc/sys/fs/inotify/max_user_watches';
    const saved = readFileSync(limitFile, 'utf8').trim();
    const tree = `${target.dir}/many-dirs`;
    for (let i = 0; i < 64; i++) mkdirSync(`${tree}/d${i}/e`, { recursive: true });
    // Armed before the limit is lowered: a directory created afterwards cannot be watched.
    const armed = await target.call('POST', '/files/watch', { path: tree, recursive: true }, { signal: AbortSignal.timeout(15_000) });
    const armedEvents = readEvents(armed);
    expect((await armedEvents.next()).value?.event).toBe('ready');
    let answer: string;
    let afterReady: string;
    try {
      writeFileSync(limitFile, '1');
      mkdirSync(`${tree}/d0/new`);
      let last;
      for await (const event of armedEvents) if (event.event !== 'change' && event.event !== ':') last = event;
      expect(last?.event).toBe('error');
      expect(last?.data.message).toMatch(/inotify watch limit reached: raise fs.inotify.max_user_watches/);
      afterReady = `error event: ${last?.data.message}`;
      const response = await target.call('POST', '/files/watch', { path: tree, recursive: true }, { signal: AbortSignal.timeout(15_000) });
      if (response.status === 200) {
        // Armed before the limit bit: the stream must end with an error event.
        let last;
        for await (const event of readEvents(response)) last = event;
        expect(last?.event).toBe('error');
        answer = `200 then error event: ${last?.data.message}`;
      } else {
        expect(response.status).toBe(503);
        answer = `${response.status}: ${(await response.json()).message}`;
      }
      expect(answer).toMatch(/inotify/);
    } finally {
      writeFileSync(limitFile, saved);
    }
    const again = new AbortController();
    const watched = await target.call('POST', '/files/watch', { path: tree, recursive: true }, { signal: again.signal });
    expect(watched.status).toBe(200);
    const first = await readEvents(watched).next();
    expect(first.value?.event).toBe('ready');
    again.abort();
    report('inotify exhausted', { answer, afterReady, recovered: true });
  });

  it('finishes a command whose child closes stdout but keeps running', async () => {
    const response = await target.call('POST', '/commands', { cmd: 'exec >&-; sleep 1; echo done >&2' });
    expect(await response.json()).toMatchObject({ stdout: '', stderr: 'done\n', exit_code: 0 });
  });

  it('finishes a command that forks a daemon, and the daemon lives on', async () => {
    const marker = `daemon-${randomBytes(4).toString('hex')}`;
    const response = await target.call('POST', '/commands', { cmd: `(setsid bash -c 'sleep 300; : ${marker}' &) ; echo started` }, { signal: AbortSignal.timeout(15_000) });
    expect(await response.json()).toMatchObject({ stdout: 'started\n', exit_code: 0 });
    const daemons = findProcesses(marker);
    expect(daemons.length).toBe(1);
    for (const pid of daemons) process.kill(pid, 'SIGKILL');
  });

  it.skipIf(!isRoot || !existsSync('/proc/sys/kernel/ns_last_pid'))('never confuses an exited tracked pid with a new process that got the same number', async () => {
    const { pid } = await (await target.call('POST', '/commands', { cmd: 'exit 7', background: true })).json();
    await waitFor(async () => (await (await target.call('GET', '/commands')).json()).processes.some((p: any) => p.pid === pid && !p.running), 5_000, 'exit');
    // Make the kernel hand out the same pid again to an unrelated process.
    let stranger;
    for (let attempt = 0; attempt < 50 && stranger?.pid !== pid; attempt++) {
      stranger?.kill('SIGKILL');
      writeFileSync('/proc/sys/kernel/ns_last_pid', String(pid - 1));
      stranger = spawn('sleep', ['300'], { stdio: 'ignore', detached: true }); // its own group, as a killed pgid would be
    }
    expect(stranger!.pid).toBe(pid);
    const killed = await (await target.call('DELETE', `/commands/${pid}`)).json();
    expect(existsSync(`/proc/${pid}`)).toBe(true);
    expect(stranger!.exitCode).toBeNull();
    stranger!.kill('SIGKILL');
    report('pid reuse', { pid, deleteAnswer: JSON.stringify(killed), strangerAlive: true });
  });
});
