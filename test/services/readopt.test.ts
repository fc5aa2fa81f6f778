// Services are commands (issue 39 §4): kill -9 of the envd executable leaves them running with their
// holders, and the next envd takes them back (same pid, same state), restarts one that ended while no envd
// ran, and supervises them from there. Boot files are read once per boot, not again by a restarted envd.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, startEnvdExecutable, waitFor, type EnvdProcess } from '../helpers/proc.js';

const TOKEN = 'services-readopt';
const root = mkdtempSync(join(tmpdir(), 'envd-svc-readopt-'));
const started: EnvdProcess[] = [];
/** The services' pids: killed after the test whatever happened. */
const pids: number[] = [];
/** Gone, or a zombie its holder has not reaped yet. */
const gone = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') ?? true;
  } catch {
    return true;
  }
};
afterAll(async () => {
  for (const envd of started) await envd.stop('SIGKILL');
  for (const pid of pids) if (!gone(pid)) process.kill(pid, 'SIGKILL');
  rmSync(root, { recursive: true, force: true });
});

const call = async (envd: EnvdProcess, method: string, path: string): Promise<{ status: number; body: any }> => {
  const response = await fetch(envd.url + path, { method, headers: { authorization: `Bearer ${TOKEN}` } });
  return { status: response.status, body: await response.json() };
};
const record = async (envd: EnvdProcess, name: string) => (await call(envd, 'GET', `/services/${name}`)).body;
const until = async (envd: EnvdProcess, name: string, check: (r: any) => boolean, what: string) => {
  let last: any;
  await waitFor(async () => check((last = await record(envd, name))), 30_000, `${name} ${what}`).catch((error: Error) => {
    throw new Error(`${error.message}: ${JSON.stringify(last)}`);
  });
  return last;
};

describe('services across a kill -9 of envd', () => {
  it('keep running, are taken back with their state, and are supervised by the next envd', { timeout: 120_000 }, async () => {
    const port = await freePort();
    const services = join(root, 'services');
    mkdirSync(services);
    // Programs, not command lines: envd runs as root here, and root's login shell on a test machine may be slow (pyenv).
    writeFileSync(join(services, 'web.json'), JSON.stringify({ cmd: 'python3', args: ['-m', 'http.server', '--bind', '127.0.0.1', String(port)], ready: { port }, restart: 'always' }));
    writeFileSync(join(services, 'worker.json'), JSON.stringify({ cmd: 'sleep', args: ['900'], depends_on: ['web'] }));
    const args = ['--state-dir', join(root, 'state'), '--spool-dir', join(root, 'spool'), '--services-dir', services, '--command-cgroups', 'off'];
    const first = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    started.push(first);
    const web = await until(first, 'web', (r) => r.state === 'ready', 'ready');
    const worker = await until(first, 'worker', (r) => r.state === 'running', 'running');
    pids.push(web.pid, worker.pid);

    // kill -9: nothing of envd's shutdown runs.
    await first.stop('SIGKILL');
    expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
    // The worker ends while no envd runs: the next one finds it ended and restarts it.
    process.kill(worker.pid, 'SIGKILL');
    await waitFor(() => gone(worker.pid), 5_000, 'the worker gone');

    const second = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    started.push(second);
    expect(await record(second, 'web')).toMatchObject({ state: 'ready', pid: web.pid, restarts: 0, ready_after_ms: web.ready_after_ms });
    const again = await until(second, 'worker', (r) => r.state === 'running' && r.pid !== worker.pid, 'restarted');
    expect(again).toMatchObject({ restarts: 1, last_exit: { signal: 'SIGKILL' } });
    // The run is still a tracked command of the new envd, and the web service is supervised by it.
    expect((await call(second, 'GET', '/commands')).body.processes.map((p: any) => p.pid)).toContain(web.pid);
    process.kill(web.pid, 'SIGKILL');
    const back = await until(second, 'web', (r) => r.state === 'ready' && r.pid !== web.pid, 'ready again');
    pids.push(again.pid, back.pid);
    expect(back.restarts).toBe(1);
    expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
    // Boot files are read once per boot: deleting a service is not undone by the next restart of envd.
    expect((await call(second, 'DELETE', '/services/worker')).status).toBe(200);
    await second.stop('SIGKILL');
    const third = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    started.push(third);
    expect((await call(third, 'GET', '/services')).body.services.map((s: any) => s.name)).toEqual(['web']);
    // A shutdown (SIGTERM) ends the services with envd and restarts none.
    await third.stop('SIGTERM');
    await waitFor(() => gone(back.pid) && gone(again.pid), 10_000, 'the services ended with envd');
  });
});
