// Services (issue 39 §4) against a real envd in process: real commands, real exits and kills, timing read
// from the services' own state (restarts, backoff_ms, started_at), never from sleeps alone.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { useCommandServer } from '../helpers/command-user.js';
import { findProcesses } from '../helpers/proc.js';
import { collectEvents } from '../helpers/sse.js';
import { bootServicesOnce } from '../../src/services/boot-files.js';
import { BACKOFF_FIRST_MS } from '../../src/services/backoff.js';
import { MAX_LOGS_ANSWER_BYTES } from '../../src/services/logs.js';
import { MAX_SERVICES } from '../../src/services/schemas.js';
import { put, service, until } from './helpers.js';

const fixture = useCommandServer();
const defined: string[] = [];
const define = async (name: string, definition: Record<string, unknown>, status = 201) => {
  defined.push(name);
  return put(fixture.server, name, definition, status);
};
const mark = (name: string) => {
  const text = `svc-${name}-${process.pid}`;
  fixture.markers.push(text);
  return text;
};
/** GET /services/{name}/logs until its page passes `check` (output arrives on its own time). */
async function waitForOutput(name: string, check: (page: any) => boolean, headers: Record<string, string> = {}): Promise<any> {
  let page: any;
  for (let i = 0; i < 200; i++) {
    const answer = await fixture.server.call('GET', `/services/${name}/logs`, undefined, { headers });
    page = await answer.json();
    if (answer.status === 200 && check(page)) return page;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${name}: no such output; last page ${JSON.stringify(page)}`);
}
afterEach(async () => {
  for (const name of defined.splice(0)) await fixture.server.json('DELETE', `/services/${name}`);
});

describe('a service', () => {
  it('is defined with 201 and its running record, listed, read, stopped, started and deleted', async () => {
    const record = await define('web', { cmd: `echo hello; sleep 900 # ${mark('web')}` });
    expect(record).toMatchObject({ name: 'web', state: 'running', restarts: 0, last_exit: null, error: null });
    expect(record.definition.restart).toBeUndefined(); // on-failure by default (docs/api.md)
    expect(record.pid).toBeGreaterThan(0);
    // A service's run is a tracked command.
    const listed = (await fixture.server.json('GET', '/commands')).body.processes.find((p: any) => p.pid === record.pid);
    expect(listed).toMatchObject({ running: true, background: true });
    expect((await fixture.server.json('GET', '/services')).body.services.map((s: any) => s.name)).toContain('web');
    const stopped = await fixture.server.json('POST', '/services/web/stop');
    expect(stopped.body).toMatchObject({ state: 'stopped', pid: null, last_exit: { signal: 'SIGTERM' } });
    expect(findProcesses(`svc-web-${process.pid}`)).toEqual([]);
    const started = await fixture.server.json('POST', '/services/web/start');
    expect(started.body.state).toBe('running');
    expect(started.body.pid).not.toBe(record.pid);
    expect((await fixture.server.json('DELETE', '/services/web')).body).toEqual({ deleted: true });
    expect((await fixture.server.json('GET', '/services/web')).status).toBe(404);
    expect(findProcesses(`svc-web-${process.pid}`)).toEqual([]);
  });

  it('restarts with restart always, the back-off doubling from 200 ms as read from its state', async () => {
    await define('flaky', { cmd: 'exit 1', restart: 'always' });
    const seen: number[] = [];
    await until(fixture.server, 'flaky', (r) => {
      if (r.state === 'backoff' && seen.at(-1) !== r.backoff_ms) seen.push(r.backoff_ms);
      return r.restarts >= 3 && r.state === 'backoff';
    }, 'three restarts');
    const record = await service(fixture.server, 'flaky');
    expect(record.last_exit).toEqual({ exit_code: 1, signal: null, reason: 'exited' });
    // Polled, so a short back-off may pass unseen; those seen are each double the one before.
    expect(seen[0]).toBe(BACKOFF_FIRST_MS);
    for (let i = 1; i < seen.length; i++) expect(seen[i]).toBe(seen[i - 1]! * 2);
    expect(record.backoff_ms).toBe(BACKOFF_FIRST_MS * 2 ** record.restarts);
  });

  it('restarts on failure only with on-failure, and stays down with no', async () => {
    await define('ok', { cmd: 'exit 0', restart: 'on-failure' });
    expect(await until(fixture.server, 'ok', (r) => r.state === 'stopped', 'stopped')).toMatchObject({ restarts: 0, last_exit: { exit_code: 0, reason: 'exited' } });
    await define('bad', { cmd: 'exit 2', restart: 'on-failure' });
    await until(fixture.server, 'bad', (r) => r.restarts >= 1, 'restarted');
    await define('once', { cmd: 'exit 3', restart: 'no' });
    expect(await until(fixture.server, 'once', (r) => r.state === 'failed', 'failed')).toMatchObject({ restarts: 0, pid: null, last_exit: { exit_code: 3 } });
  });

  it('is restarted after kill -9 of its process, within the back-off', async () => {
    const first = await define('victim', { cmd: `sleep 900 # ${mark('victim')}`, restart: 'on-failure' });
    const killedAt = Date.now();
    process.kill(first.pid, 'SIGKILL');
    const again = await until(fixture.server, 'victim', (r) => r.state === 'running' && r.pid !== first.pid, 'running again');
    expect(again).toMatchObject({ restarts: 1, last_exit: { signal: 'SIGKILL', reason: 'signaled' } });
    // Its next run started no earlier than the first back-off after the end.
    expect(Date.parse(again.started_at) - killedAt).toBeGreaterThanOrEqual(BACKOFF_FIRST_MS - 20);
  });

  it('starts after its dependency is ready, in order, and a running one restarts when changed', async () => {
    // In /tmp: the service's user writes it (the test's TMPDIR may be root's).
    const flag = `/tmp/envd-svc-db-${process.pid}-${Date.now()}`;
    await define('db', { cmd: `sleep 0.5; touch ${flag}; echo "db accepting connections"; sleep 900 # ${mark('db')}`, ready: { log: 'accepting connections' } });
    const app = await define('app', { cmd: `test -e ${flag} && echo "db was up"; sleep 900 # ${mark('app')}`, depends_on: ['db'] });
    expect(app).toMatchObject({ state: 'waiting', pid: null, error: 'waiting for db' });
    const db = await until(fixture.server, 'db', (r) => r.state === 'ready', 'ready');
    expect(db.ready_after_ms).toBeGreaterThanOrEqual(500);
    const running = await until(fixture.server, 'app', (r) => r.state === 'running', 'running');
    expect(Date.parse(running.started_at)).toBeGreaterThanOrEqual(Date.parse(db.started_at) + db.ready_after_ms);
    const logs = await waitForOutput('app', (page) => page.stdout !== '');
    expect(logs.stdout).toBe('db was up\n');
    // The same definition: nothing restarts. A changed one: a new run.
    expect((await put(fixture.server, 'app', { cmd: `test -e ${flag} && echo "db was up"; sleep 900 # ${mark('app')}`, depends_on: ['db'] }, 200)).pid).toBe(running.pid);
    const changed = await put(fixture.server, 'app', { cmd: `echo changed; sleep 900 # ${mark('app')}`, depends_on: ['db'] }, 200);
    expect(changed.pid).not.toBe(running.pid);
    expect(changed.state).toBe('running');
    rmSync(flag, { force: true });
  });

  it('refuses a cycle, a missing dependency and a bad check with 400, naming them', async () => {
    await define('a', { cmd: `sleep 900 # ${mark('a')}` });
    await define('b', { cmd: `sleep 900 # ${mark('b')}`, depends_on: ['a'] });
    const cycle = await fixture.server.json('PUT', '/services/a', { cmd: 'sleep 900', depends_on: ['b'] });
    expect(cycle).toEqual({ status: 400, body: { message: 'body/depends_on: a dependency cycle: a → b → a' } });
    expect((await fixture.server.json('PUT', '/services/c', { cmd: 'true', depends_on: ['nope'] })).body.message).toMatch(/no service named "nope"/);
    expect((await fixture.server.json('PUT', '/services/c', { cmd: 'true', depends_on: ['c'] })).body.message).toMatch(/cannot depend on itself/);
    expect((await fixture.server.json('PUT', '/services/c', { cmd: 'true', ready: { log: '(x)\\1' } })).status).toBe(400);
    expect((await fixture.server.json('PUT', '/services/c', { cmd: 'true', user: 'no-such-user-here' })).status).toBe(400);
    expect((await fixture.server.json('PUT', '/services/c', { cmd: 'true', restart: 'sometimes' })).status).toBe(400);
    expect((await fixture.server.json('PUT', '/services/.hidden', { cmd: 'true' })).status).toBe(400);
    expect((await fixture.server.json('GET', '/services/c')).status).toBe(404);
    // Unchanged by the refusals.
    expect((await service(fixture.server, 'a')).definition.depends_on).toBeUndefined();
  });

  it('reads the current run\'s output by cursor, and follows it as events', async () => {
    const file = join(tmpdir(), `envd-svc-logs-${process.pid}-${Date.now()}`);
    await define('talker', { cmd: `echo one; echo err >&2; while [ ! -e ${file} ]; do sleep 0.05; done; echo two; sleep 900 # ${mark('talker')}` });
    const page = await waitForOutput('talker', (p) => p.stdout === 'one\n' && p.stderr === 'err\n');
    expect(page).toMatchObject({ stdout: 'one\n', stderr: 'err\n', cursor: '4-4', more: false });
    const follow = await fixture.server.call('GET', `/services/talker/logs?follow=1&from=${page.cursor}`);
    expect(follow.headers.get('content-type')).toMatch(/text\/event-stream/);
    writeFileSync(file, '');
    const reader = collectEvents(follow);
    const next = await waitForOutput('talker', (p) => p.stdout !== '', { 'last-event-id': page.cursor });
    expect(next).toMatchObject({ stdout: 'two\n', stderr: '', cursor: '8-4' });
    await fixture.server.json('POST', '/services/talker/stop');
    const events = await reader;
    expect(events.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('')).toBe('two\n');
    expect(events.at(-1)?.event).toBe('exit');
    rmSync(file, { force: true });
    expect((await fixture.server.json('GET', '/services/talker/logs?from=999-0')).status).toBe(416);
    expect((await fixture.server.json('GET', '/services/talker/logs?from=x')).status).toBe(400);
  });
});

describe('limits', () => {
  it(`pages logs at ${MAX_LOGS_ANSWER_BYTES} bytes, the cursor taking up exactly where a page stopped`, async () => {
    const size = MAX_LOGS_ANSWER_BYTES + 1000;
    await define('loud', { cmd: `head -c ${size} /dev/zero | tr '\\0' x; sleep 900 # ${mark('loud')}` });
    const first = await waitForOutput('loud', (p) => p.stdout.length === MAX_LOGS_ANSWER_BYTES);
    expect(first).toMatchObject({ more: true, cursor: `${MAX_LOGS_ANSWER_BYTES}-0` });
    const second = await waitForOutput('loud', (p) => p.stdout.length === 1000, { 'last-event-id': first.cursor });
    expect(second).toMatchObject({ more: false, cursor: `${size}-0` });
  });

  it(`takes ${MAX_SERVICES} services and refuses one more with 409`, { timeout: 120_000 }, async () => {
    await define('gate', { cmd: `sleep 900 # ${mark('gate')}`, ready: { log: 'never' } });
    for (let i = 1; i < MAX_SERVICES; i++) await define(`w${i}`, { cmd: 'true', depends_on: ['gate'] });
    expect((await fixture.server.json('GET', '/services')).body.services).toHaveLength(MAX_SERVICES);
    const refused = await fixture.server.json('PUT', '/services/one-more', { cmd: 'true' });
    expect(refused).toEqual({ status: 409, body: { message: `at most ${MAX_SERVICES} services: delete one first` } });
    // A change of an existing one is no new service.
    expect((await fixture.server.json('PUT', '/services/w1', { cmd: 'true', depends_on: ['gate'], restart: 'no' })).status).toBe(200);
  });
});

describe('boot files', () => {
  it('start in dependency order; a cycle and a missing dependency fail with their error, the others start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'envd-svc-boot-'));
    try {
      const files: Record<string, unknown> = {
        base: { cmd: `sleep 0.3; echo up; sleep 900 # ${mark('base')}`, ready: { log: '^up$' } },
        top: { cmd: `sleep 900 # ${mark('top')}`, depends_on: ['base'] },
        loop1: { cmd: 'sleep 900', depends_on: ['loop2'] },
        loop2: { cmd: 'sleep 900', depends_on: ['loop1'] },
        orphan: { cmd: 'sleep 900', depends_on: ['ghost'] },
        above: { cmd: 'sleep 900', depends_on: ['orphan'] },
      };
      for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, `${name}.json`), JSON.stringify(body));
      writeFileSync(join(dir, 'broken.json'), '{"cmd": ');
      defined.push(...Object.keys(files));
      const stateDir = mkdtempSync(join(tmpdir(), 'envd-svc-boot-state-'));
      const logs: unknown[] = [];
      bootServicesOnce(dir, stateDir, fixture.server.app.envd.services, { info: (o: unknown) => logs.push(o), error: () => {}, warn: () => {} } as never);
      rmSync(stateDir, { recursive: true, force: true });
      const top = await until(fixture.server, 'top', (r) => r.state === 'running', 'running');
      const base = await service(fixture.server, 'base');
      expect(base.state).toBe('ready');
      expect(Date.parse(top.started_at)).toBeGreaterThanOrEqual(Date.parse(base.started_at) + base.ready_after_ms);
      expect(await service(fixture.server, 'loop1')).toMatchObject({ state: 'failed', pid: null, error: 'a dependency cycle: loop1 → loop2 → loop1' });
      expect((await service(fixture.server, 'loop2')).error).toBe('a dependency cycle: loop2 → loop1 → loop2');
      expect((await service(fixture.server, 'orphan')).error).toBe('depends on "ghost", which is not defined');
      expect(await until(fixture.server, 'above', (r) => r.state === 'failed', 'failed')).toMatchObject({ error: expect.stringContaining('depends on "orphan", which cannot start') });
      expect(JSON.stringify(logs)).toContain('broken.json');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
