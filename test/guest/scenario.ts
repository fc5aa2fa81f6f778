import { createHash, randomBytes } from 'node:crypto';
import { expect, it } from 'vitest';
import { collectEvents, readEvents } from '../helpers/sse.js';
import { run, type EnvdClient } from './client.js';

const UPLOAD_BYTES = 100 * 1024 * 1024;

/**
 * The steps a control plane takes against a freshly booted guest, registered as one `it`
 * each so a report shows which route works inside the guest and which does not.
 * `guest()` is read when a step runs, after the describe's beforeAll booted the machine.
 */
export function registerScenario(guest: () => { client: EnvdClient; name: string }, token: string): void {
  it('answers /health without a token', async () => {
    const { status, body } = await guest().client.json('GET', '/health');
    expect(status).toBe(200);
    expect(body.status).toBe('ok');
  });

  it('accepts /init with a token and envs, then refuses a wrong token', async () => {
    const { client } = guest();
    client.token = token;
    const init = await client.call('POST', '/init', { access_token: token, envs: { GREETING: 'hello from the host' }, default_user: 'user', timestamp: new Date().toISOString() });
    expect(init.status).toBe(204);
    const wrong = await client.call('GET', '/envs', undefined, { headers: { authorization: 'Bearer not-the-token' } });
    expect(wrong.status).toBe(401);
  });

  it('runs a command as the default user with the sandbox envs', async () => {
    const result = await run(guest().client, 'id -un; echo "$GREETING"; pwd');
    expect(result).toMatchObject({ exit_code: 0, stdout: 'user\nhello from the host\n/home/user\n' });
  });

  it('runs a command as root when asked', async () => {
    const result = await run(guest().client, 'id -u', { user: 'root' });
    expect(result.stdout).toBe('0\n');
  });

  it('shows up as envd in ps (the comm that top, systemd-cgtop and OOM messages name too)', async () => {
    const result = await run(guest().client, 'ps -o comm= -p "$(pidof envd)"; cat /proc/"$(pidof envd)"/comm', { user: 'root' });
    expect(result).toMatchObject({ exit_code: 0, stdout: 'envd\nenvd\n' });
  });

  it('streams a command as server-sent events: start, stdout, exit', async () => {
    const response = await guest().client.call('POST', '/commands/stream', { cmd: 'for i in 1 2 3; do echo line$i; done; echo oops >&2; exit 3' });
    expect(response.status).toBe(200);
    const events = await collectEvents(response);
    expect(events[0]!.event).toBe('start');
    expect(events.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('')).toBe('line1\nline2\nline3\n');
    expect(events.filter((e) => e.event === 'stderr').map((e) => e.data.data).join('')).toBe('oops\n');
    expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 3 } });
  });

  let uploaded = '';
  it('uploads 100 MiB and downloads the same bytes', async () => {
    const { client, name } = guest();
    const data = randomBytes(UPLOAD_BYTES);
    uploaded = createHash('sha256').update(data).digest('hex');
    const started = Date.now();
    const upload = await client.call('PUT', '/files/raw?path=/home/user/big.bin', undefined, {
      headers: { 'content-type': 'application/octet-stream' },
      body: data,
    });
    expect(upload.status).toBe(200);
    expect(await upload.json()).toMatchObject({ path: '/home/user/big.bin', size: UPLOAD_BYTES });
    const uploadMs = Date.now() - started;

    const download = await client.call('GET', '/files/raw?path=/home/user/big.bin');
    expect(download.status).toBe(200);
    const hash = createHash('sha256');
    for await (const chunk of download.body!) hash.update(chunk);
    expect(hash.digest('hex')).toBe(uploaded);
    console.log(`${name}: 100 MiB upload ${uploadMs} ms, download ${Date.now() - started - uploadMs} ms`);
  });

  it('has the uploaded file whole on the guest disk, owned by the default user', async () => {
    expect(uploaded, 'the upload step did not run').not.toBe('');
    const inGuest = await run(guest().client, 'sha256sum /home/user/big.bin; stat -c %U /home/user/big.bin');
    expect(inGuest.stdout).toBe(`${uploaded}  /home/user/big.bin\nuser\n`);
    expect((await guest().client.json('DELETE', '/files?path=/home/user/big.bin')).body).toEqual({ removed: true });
  });

  it('reports a file created in a watched directory', async () => {
    const { client } = guest();
    await expectWatchToSee(client, async () => {
      const write = await client.call('PUT', '/files/raw?path=/home/user/watched/new.txt', undefined, {
        headers: { 'content-type': 'application/octet-stream' },
        body: 'hi\n',
      });
      expect(write.status).toBe(200);
    });
  });

  it('kills a background command and forgets it', async () => {
    const { client } = guest();
    const started = await client.json('POST', '/commands', { cmd: 'sleep 600', background: true });
    expect(started.status).toBe(200);
    const { pid } = started.body;
    expect((await client.json('DELETE', `/commands/${pid}`)).body).toEqual({ killed: true });
    expect((await run(client, `test -e /proc/${pid} && echo alive || echo gone`)).stdout).toBe('gone\n');
    expect((await client.json('DELETE', `/commands/${pid}`)).body).toEqual({ killed: false });
  });

  it('runs a command on a terminal through the single executable (the holder it carries)', async () => {
    const result = await run(guest().client, 'tty; stty size; echo "$TERM"', { pty: { cols: 90, rows: 20 } });
    expect(result.stdout).toMatch(/^\/dev\/pts\/\d+\r\n20 90\r\nxterm-256color\r\n$/);
  });

  it('comes back after kill -9 and re-adopts its commands: printing, stdin, terminal, one about to exit', async () => {
    const { client, name } = guest();
    const started = await startRestartWitnesses(client);
    const before = await envdPid(client);
    // Detached from envd's process group and delayed, so envd answers before it dies.
    await client.json('POST', '/commands', { cmd: 'sleep 1; kill -9 $(pidof envd)', user: 'root', background: true });
    const backMs = await waitForRestart(client, before);
    console.log(`${name}: envd back ${backMs} ms after kill -9 (systemd Restart=always, RestartSec=200ms)`);

    // The restarted envd read its token back from /run/envd/token: still initialised,
    // so /init stays closed to anyone without the token.
    const hijack = await fetch(`${client.url}/init`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ access_token: 'hijack' }) });
    expect(hijack.status).toBe(401);
    await checkRestartWitnesses(client, started);
    if (name === 'nspawn') expect(backMs).toBeLessThan(2_000);
  });

  it('loses no command to `systemctl restart envd` after the binary is replaced', async () => {
    const { client, name } = guest();
    const started = await startRestartWitnesses(client);
    const before = await envdPid(client);
    // A new inode at the same path, as a package upgrade leaves it; then the unit's restart (SIGHUP, KillMode=process).
    await client.json('POST', '/commands', {
      cmd: 'sleep 1; cp /usr/local/bin/envd /usr/local/bin/envd.new && mv -f /usr/local/bin/envd.new /usr/local/bin/envd && systemctl restart envd',
      user: 'root',
      background: true,
    });
    const backMs = await waitForRestart(client, before);
    console.log(`${name}: envd back ${backMs} ms after systemctl restart with a replaced binary`);
    await checkRestartWitnesses(client, started);
  });

  it('names its process envd in ps', async () => {
    const result = await run(guest().client, 'ps -o comm= -p $(pidof envd)', { user: 'root' });
    expect(result.stdout).toBe('envd\n');
  });
}

/** Watches /home/user/watched (made here), runs `create`, and waits for the change of /home/user/watched/new.txt. */
export async function expectWatchToSee(client: EnvdClient, create: () => Promise<void>): Promise<void> {
  expect((await client.json('POST', '/files/mkdir', { path: '/home/user/watched' })).status).toBe(200);
  const abort = new AbortController();
  const response = await client.call('POST', '/files/watch', { path: '/home/user/watched' }, { signal: abort.signal });
  expect(response.status).toBe(200);
  const events = readEvents(response);
  try {
    expect((await events.next()).value).toMatchObject({ event: 'ready' });
    await create();
    for (;;) {
      const { value, done } = await events.next();
      expect(done).toBeFalsy();
      if (value!.event === 'change' && value!.data.path === '/home/user/watched/new.txt') break;
    }
  } finally {
    abort.abort();
  }
}

export interface Witnesses {
  ticker: number;
  reader: number;
  terminal: number;
  ending: number;
}

/** Commands whose fate across a restart of envd tells whether it lost anything. */
export async function startRestartWitnesses(client: EnvdClient): Promise<Witnesses> {
  const start = async (body: Record<string, unknown>) => {
    const { status, body: answer } = await client.json('POST', '/commands', { ...body, background: true });
    expect(status, JSON.stringify(answer)).toBe(200);
    return answer.pid as number;
  };
  const witnesses = {
    ticker: await start({ cmd: 'for i in $(seq 1 40); do echo "tick $i"; sleep 0.1; done; exit 7' }),
    reader: await start({ cmd: 'cat', stdin: true }),
    terminal: await start({ pty: { cols: 80, rows: 24 } }),
    ending: await start({ cmd: 'sleep 1.5; exit 5' }),
  };
  expect((await client.json('POST', `/commands/${witnesses.reader}/stdin`, { data: 'before\n' })).status).toBe(200);
  expect((await client.json('POST', `/commands/${witnesses.terminal}/stdin`, { data: 'echo one-$((1+1))\n' })).status).toBe(200);
  return witnesses;
}

/** The pid of the envd that answers now, as `pidof envd` in the guest prints it. */
export async function envdPid(client: EnvdClient): Promise<string> {
  const pid = (await run(client, 'pidof envd', { user: 'root' })).stdout.trim();
  expect(pid).toMatch(/^\d+$/);
  return pid;
}

/**
 * Polls until an envd other than `before` (its pid) answers; returns the milliseconds from the
 * first request that failed (the old one gone) to the new one's first answer. A failed request
 * alone does not mean the old envd is gone: under TCG a busy guest (copying the 110 MB executable)
 * can answer /health too late, and the old envd answered once more before its restart.
 */
export async function waitForRestart(client: EnvdClient, before: string): Promise<number> {
  let downAt = 0;
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    try {
      const health = await fetch(`${client.url}/health`, { signal: AbortSignal.timeout(2_000) });
      if (health.status === 200) {
        const { status, body } = await client.json('POST', '/commands', { cmd: 'pidof envd', user: 'root' });
        const now = status === 200 ? String(body.stdout).trim() : '';
        if (/^\d+$/.test(now) && now !== before) {
          expect(downAt, 'no request failed while envd restarted').toBeGreaterThan(0);
          return Date.now() - downAt;
        }
      }
    } catch {
      downAt ||= Date.now();
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`no envd other than pid ${before} answered within 60 s`);
}

export async function checkRestartWitnesses(client: EnvdClient, w: Witnesses): Promise<void> {
  const listed = (await client.json('GET', '/commands')).body.processes.map((p: { pid: number }) => p.pid);
  for (const pid of Object.values(w)) expect(listed).toContain(pid);
  expect((await client.json('POST', `/commands/${w.reader}/stdin`, { data: 'after\n' })).status).toBe(200);
  expect((await client.json('DELETE', `/commands/${w.reader}/stdin`)).status).toBe(200);
  expect((await client.json('GET', `/commands/${w.reader}/wait`)).body).toEqual({ stdout: 'before\nafter\n', stderr: '', exit_code: 0, reason: 'exited' });
  expect((await client.json('POST', `/commands/${w.terminal}/stdin`, { data: 'echo two-$((1+1)); exit 3\n' })).status).toBe(200);
  const terminal = (await client.json('GET', `/commands/${w.terminal}/wait`)).body;
  expect(terminal.stdout).toContain('one-2');
  expect(terminal.stdout).toContain('two-2');
  expect(terminal.exit_code).toBe(3);
  expect((await client.json('GET', `/commands/${w.ticker}/wait`)).body).toEqual({
    stdout: Array.from({ length: 40 }, (_, i) => `tick ${i + 1}\n`).join(''),
    stderr: '',
    exit_code: 7,
    reason: 'exited',
  });
  expect((await client.json('GET', `/commands/${w.ending}/wait`)).body).toEqual({ stdout: '', stderr: '', exit_code: 5, reason: 'exited' });
}
