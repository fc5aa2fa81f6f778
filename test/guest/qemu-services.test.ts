// Services in a guest (issue 39 §4): the busybox + musl template with a service declared in the image
// (/etc/envd/services/httpd.json: busybox httpd, restart always, ready when it answers HTTP), booted in qemu
// with envd-init as PID 1. The service starts at boot, is reachable from the host at the guest's address,
// is restarted within the back-off after kill -9, and stays running and owned across kill -9 of envd.
//
// httpd binds 0.0.0.0:8080 here: reaching a server bound to 127.0.0.1 from outside needs the loopback
// forward (issue 39 §2, another branch); with it, this service can bind 127.0.0.1 as the issue says.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootGuest, staticNetwork, type BootedGuest } from './boot.js';
import { run, type EnvdClient } from './client.js';
import { BUSYBOX_IMAGE_FILE } from './paths.js';
import { envdPid, waitForRestart } from './scenario.js';

const PAGE = 'hello from a template service\n';
const HTTPD = { cmd: 'httpd', args: ['-f', '-p', '0.0.0.0:8080', '-h', '/srv/www'], user: 'root', restart: 'always', ready: { http: { url: 'http://127.0.0.1:8080/' } } };
const AFTER = { cmd: 'sleep', args: ['100000'], depends_on: ['httpd'] };

/** A copy of the busybox template with the service files written into it (debugfs: no mount, no root fs of ours touched). */
function templateWithServices(dir: string): string {
  const image = join(dir, 'services.ext4');
  execFileSync('cp', ['--sparse=always', BUSYBOX_IMAGE_FILE, image]);
  writeFileSync(join(dir, 'httpd.json'), JSON.stringify(HTTPD));
  writeFileSync(join(dir, 'after.json'), JSON.stringify(AFTER));
  writeFileSync(join(dir, 'index.html'), PAGE);
  // debugfs makes a directory in its current one whatever the path says: cd first, then relative names.
  const commands = [
    'cd /',
    'mkdir srv',
    'cd /srv',
    'mkdir www',
    'cd /srv/www',
    `write ${join(dir, 'index.html')} index.html`,
    'cd /etc/envd',
    'mkdir services',
    'cd /etc/envd/services',
    `write ${join(dir, 'httpd.json')} httpd.json`,
    `write ${join(dir, 'after.json')} after.json`,
  ];
  writeFileSync(join(dir, 'debugfs.cmds'), `${commands.join('\n')}\n`);
  execFileSync('debugfs', ['-w', '-f', join(dir, 'debugfs.cmds'), image], { stdio: 'ignore' });
  const cat = (path: string) => execFileSync('debugfs', ['-R', `cat ${path}`, image], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  expect(cat('/srv/www/index.html')).toBe(PAGE);
  expect(JSON.parse(cat('/etc/envd/services/httpd.json'))).toEqual(HTTPD);
  return image;
}

describe('a template service in a qemu VM (busybox + musl, envd-init)', () => {
  let guest: BootedGuest | undefined;
  let client: EnvdClient;
  let site: string;
  let bootedAt = 0;
  const service = async (name: string) => (await client.json('GET', `/services/${name}`)).body;
  const until = async (name: string, check: (record: any) => boolean, what: string, timeoutMs = 60_000) => {
    const deadline = Date.now() + timeoutMs;
    let last: any;
    while (Date.now() < deadline) {
      last = await service(name);
      if (check(last)) return last;
      await new Promise((r) => setTimeout(r, 50));
    }
    const logs = (await client.json('GET', `/services/${name}/logs`)).body;
    throw new Error(`${name}: not ${what} within ${timeoutMs} ms: ${JSON.stringify(last)}; its output: ${JSON.stringify(logs)}`);
  };

  beforeAll(async () => {
    guest = await bootGuest({ image: templateWithServices, name: 'services', append: staticNetwork('envd-services'), extraPorts: [8080] });
    // When qemu started: the boot includes everything the services do before envd's first /health.
    bootedAt = Date.now() - guest.bootMs;
    client = guest.client;
    site = guest.vm.extraUrls[8080]!;
  });

  afterAll(async () => {
    await guest?.stop();
  });

  it('starts the declared services at boot in dependency order; the server answers the host at the guest\'s address', async () => {
    const httpd = await until('httpd', (r) => r.state === 'ready', 'ready');
    console.log(`services: boot → service ready in ${Date.now() - bootedAt} ms (TCG; httpd ready ${httpd.ready_after_ms} ms after its start)`);
    const after = await until('after', (r) => r.state === 'running', 'running');
    expect(Date.parse(after.started_at)).toBeGreaterThanOrEqual(Date.parse(httpd.started_at) + httpd.ready_after_ms);
    const page = await fetch(`${site}/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toBe(PAGE);
    // The run is a tracked command of envd.
    expect((await client.json('GET', '/commands')).body.processes.map((p: { pid: number }) => p.pid)).toContain(httpd.pid);
  });

  it('restarts the service within the back-off after kill -9 of it', async () => {
    const before = await service('httpd');
    const killedAt = Date.now();
    await run(client, `kill -9 ${before.pid}`, { user: 'root' });
    const after = await until('httpd', (r) => r.state === 'ready' && r.pid !== before.pid, 'ready again');
    const backMs = Date.now() - killedAt;
    console.log(`services: httpd ready again ${backMs} ms after kill -9 (back-off ${200} ms, TCG)`);
    expect(after).toMatchObject({ restarts: before.restarts + 1, last_exit: { signal: 'SIGKILL', reason: 'signaled' } });
    expect(await (await fetch(`${site}/`)).text()).toBe(PAGE);
  });

  it('leaves the service running and owned across kill -9 of envd', async () => {
    const before = await service('httpd');
    const envdBefore = await envdPid(client);
    await client.json('POST', '/commands', { cmd: 'sleep 1; kill -9 $(pidof envd)', user: 'root', background: true });
    const backMs = await waitForRestart(client, envdBefore);
    console.log(`services: envd back ${backMs} ms after kill -9; httpd kept running`);
    expect(await service('httpd')).toMatchObject({ state: 'ready', pid: before.pid, restarts: before.restarts });
    expect((await run(client, `test -e /proc/${before.pid} && echo alive`, { user: 'root' })).stdout).toBe('alive\n');
    expect((await client.json('GET', '/commands')).body.processes.map((p: { pid: number }) => p.pid)).toContain(before.pid);
    expect(await (await fetch(`${site}/`)).text()).toBe(PAGE);
    // Still supervised by the new envd: another kill -9 of the service is restarted again.
    await run(client, `kill -9 ${before.pid}`, { user: 'root' });
    expect(await until('httpd', (r) => r.state === 'ready' && r.pid !== before.pid, 'ready again')).toMatchObject({ restarts: before.restarts + 1 });
  });
});
