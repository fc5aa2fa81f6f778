// envd in a VM booted from an image with no glibc and no systemd (issue 25 §5):
// busybox-static and musl from Debian, made into a template by
// rootfs/image-to-template.mjs, so envd-init is its PID 1. The network comes
// from the kernel command line's ip=, as Firecracker passes it.
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEvents } from '../helpers/sse.js';
import { bootGuest, staticNetwork, type BootedGuest } from './boot.js';
import { createClient, run, waitForHealth, type EnvdClient } from './client.js';
import { BUSYBOX_IMAGE_FILE } from './paths.js';
import { resumeIncoming, startQemu, type QemuGuest } from './qemu.js';
import { checkRestartWitnesses, envdPid, expectWatchToSee, startRestartWitnesses, waitForRestart } from './scenario.js';

const NETWORK = staticNetwork('envd-busybox');
const UPLOAD_BYTES = 100 * 1024 * 1024;

describe('envd in a qemu VM booted from a busybox + musl image, envd-init as PID 1', () => {
  let guest: BootedGuest | undefined;
  let vm: QemuGuest | undefined;
  let restored: QemuGuest | undefined;
  let dir: string;
  let token: string;
  let client: EnvdClient;

  beforeAll(async () => {
    // /init is the first test's: it checks the answer.
    guest = await bootGuest({ image: BUSYBOX_IMAGE_FILE, name: 'busybox', append: NETWORK, init: false });
    ({ vm, dir, token, client } = guest);
    const files = statSync(BUSYBOX_IMAGE_FILE).blocks * 512;
    console.log(`busybox: boot to first /health 200 in ${guest.bootMs} ms (TCG); image ${(files / 1048576).toFixed(0)} MiB allocated of ${(statSync(BUSYBOX_IMAGE_FILE).size / 1048576).toFixed(0)} MiB`);
    client.token = token;
  });

  afterAll(async () => {
    await restored?.stop();
    await guest?.stop();
  });

  it('has no glibc and no systemd; PID 1 is envd-init; envd idles small', async () => {
    expect((await client.call('POST', '/init', { access_token: token, timestamp: new Date().toISOString() })).status).toBe(204);
    const result = await run(client, 'readlink /proc/1/exe; ls /lib; test -e /lib/systemd/systemd || echo no-systemd; ls /lib/x86_64-linux-gnu 2>&1 | head -1', { user: 'root' });
    expect(result.stdout).toMatch(/^\/usr\/local\/lib\/envd\/envd-init\nld-musl-x86_64\.so\.1\nx86_64-linux-musl\nno-systemd\nls: \/lib\/x86_64-linux-gnu: No such file or directory\n$/);
    await new Promise((r) => setTimeout(r, 2_000));
    const metrics = (await client.json('GET', '/metrics')).body;
    console.log(`busybox: envd idle RSS ${(metrics.envd_rss_bytes / 1048576).toFixed(1)} MiB`);
  });

  it('runs commands as root and as a second user with supplementary groups from /etc/group', async () => {
    expect((await run(client, 'id', { user: 'root' })).stdout).toMatch(/^uid=0\(root\) gid=0\(root\)/);
    expect((await run(client, 'id; echo $HOME $USER $SHELL; pwd')).stdout).toBe('uid=1000(user) gid=1000(user) groups=1000(user),2000(devs),2001(ops)\n/home/user user /bin/sh\n/home/user\n');
  });

  it('feeds stdin to a command and closes it', async () => {
    const { body } = await client.json('POST', '/commands', { cmd: 'cat -n', background: true, stdin: true });
    expect((await client.json('POST', `/commands/${body.pid}/stdin`, { data: 'hello\n' })).status).toBe(200);
    expect((await client.json('DELETE', `/commands/${body.pid}/stdin`)).status).toBe(200);
    expect((await client.json('GET', `/commands/${body.pid}/wait`)).body).toEqual({ stdout: '     1\thello\n', stderr: '', exit_code: 0, reason: 'exited' });
  });

  it('runs a terminal that resizes and takes Ctrl-C (devpts mounted by envd-init)', async () => {
    const { body } = await client.json('POST', '/commands', { pty: { cols: 80, rows: 24 }, background: true });
    const abort = new AbortController();
    const events = readEvents(await client.call('GET', `/commands/${body.pid}/stream`, undefined, { signal: abort.signal }));
    let text = '';
    const until = async (pattern: RegExp) => {
      while (!pattern.test(text)) {
        const { value, done } = await events.next();
        if (done) throw new Error(`stream ended before ${pattern}: ${JSON.stringify(text)}`);
        if (value.event === 'stdout') text += value.data.data;
      }
    };
    try {
      await client.json('POST', `/commands/${body.pid}/stdin`, { data: 'stty size\n' });
      await until(/24 80/);
      expect((await client.json('POST', `/commands/${body.pid}/resize`, { cols: 132, rows: 40 })).status).toBe(200);
      await client.json('POST', `/commands/${body.pid}/stdin`, { data: 'stty size\n' });
      await until(/40 132/);
      await client.json('POST', `/commands/${body.pid}/stdin`, { data: 'sleep 100; echo slept\n' });
      await new Promise((r) => setTimeout(r, 500));
      await client.json('POST', `/commands/${body.pid}/stdin`, { data: '\u0003' });
      await client.json('POST', `/commands/${body.pid}/stdin`, { data: 'echo "after $((6*7))"\n' });
      await until(/after 42/);
      // The terminal echoes the typed line; the command's own output would be a line of its own.
      expect(text).not.toMatch(/(^|\n)slept\r\n/);
    } finally {
      abort.abort();
      await client.json('DELETE', `/commands/${body.pid}`);
    }
  });

  it('uploads 100 MiB and downloads the same bytes', async () => {
    const data = randomBytes(UPLOAD_BYTES);
    const digest = createHash('sha256').update(data).digest('hex');
    const upload = await client.call('PUT', '/files/raw?path=/home/user/big.bin', undefined, { headers: { 'content-type': 'application/octet-stream' }, body: data });
    expect(upload.status).toBe(200);
    const download = await client.call('GET', '/files/raw?path=/home/user/big.bin');
    const hash = createHash('sha256');
    for await (const chunk of download.body!) hash.update(chunk);
    expect(hash.digest('hex')).toBe(digest);
    expect((await run(client, 'sha256sum /home/user/big.bin; stat -c %U /home/user/big.bin')).stdout).toBe(`${digest}  /home/user/big.bin\nuser\n`);
    await client.json('DELETE', '/files?path=/home/user/big.bin');
  });

  it('reports a file created in a watched directory', async () => {
    await expectWatchToSee(client, async () => void (await run(client, 'echo hi > /home/user/watched/new.txt')));
  });

  it('searches, finds, reads line ranges and edits with no rg in the image (issue 42)', async () => {
    expect((await run(client, 'command -v rg || echo no-rg; mkdir -p /home/user/proj/src /home/user/proj/build && cd /home/user/proj && mkdir .git && printf "build/\\n" > .gitignore && printf "one\\nconst Needle = 1;\\nthree\\n" > src/a.ts && echo needle > build/out.js && echo needle > .hidden')).stdout).toBe('no-rg\n');
    const response = await client.call('POST', '/files/search', { path: '/home/user/proj', pattern: 'needle' });
    const events = (await response.text()).trim().split('\n').map((line) => JSON.parse(line));
    expect(events).toEqual([
      expect.objectContaining({ type: 'match', path: '/home/user/proj/src/a.ts', line: 2, column: 7, text: 'const Needle = 1;' }),
      expect.objectContaining({ type: 'summary', files_matched: 1, matches: 1 }),
    ]);
    const found = (await client.json('GET', '/files/find?path=/home/user/proj&glob=*.ts')).body;
    expect(found.entries.map((entry: { path: string }) => entry.path)).toEqual(['/home/user/proj/src/a.ts']);
    expect((await client.json('GET', '/files?path=/home/user/proj/src/a.ts&from_line=3&lines=1')).body).toMatchObject({ data: 'three\n', total_lines: 3 });
    const edited = await client.json('POST', '/files/edit', { path: '/home/user/proj/src/a.ts', edits: [{ old: 'Needle', new: 'Pin' }] });
    expect(edited.body).toMatchObject({ replacements: 1 });
    expect((await run(client, 'cat /home/user/proj/src/a.ts; stat -c %U /home/user/proj/src/a.ts')).stdout).toBe('one\nconst Pin = 1;\nthree\nuser\n');
  });

  it('comes back after kill -9 of envd (envd-init restarts it) and re-adopts printing commands, stdin and a terminal', async () => {
    const witnesses = await startRestartWitnesses(client);
    const before = await envdPid(client);
    await client.json('POST', '/commands', { cmd: 'sleep 1; kill -9 $(pidof envd)', user: 'root', background: true });
    const backMs = await waitForRestart(client, before);
    console.log(`busybox: envd back ${backMs} ms after kill -9 (envd-init, 200 ms back-off)`);
    await checkRestartWitnesses(client, witnesses);
  });

  describe('snapshot and restore', () => {
    let pid = 0;
    const secondToken = randomBytes(24).toString('hex');

    it('saves the running VM with memory and resumes it in a new qemu; /init takes a new token', async () => {
      pid = (await client.json('POST', '/commands', { cmd: 'sleep 15; echo survived the restore', background: true })).body.pid;
      const state = join(dir, 'vm.state');
      await vm!.saveState(state);
      await vm!.stop();
      vm = undefined;
      restored = await startQemu({ disk: join(dir, 'disk.qcow2'), dir, name: 'busybox-restored', memoryMiB: 512, append: NETWORK, incoming: state });
      await resumeIncoming(restored.qmp);
      await waitForHealth(restored.url, 60_000, restored.alive);
      client = createClient(restored.url);
      client.token = token;
      expect((await client.call('POST', '/init', { access_token: secondToken, timestamp: new Date().toISOString() })).status).toBe(204);
      client.token = secondToken;
      expect((await client.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: 'survived the restore\n', stderr: '', exit_code: 0, reason: 'exited' });
    });

    it('powers off cleanly on busybox poweroff: envd and its commands end, the VM stops', async () => {
      await client.json('POST', '/commands', { cmd: 'sleep 600', background: true });
      await client.json('POST', '/commands', { cmd: 'sleep 1; poweroff', user: 'root', background: true });
      const started = Date.now();
      while (restored!.alive() && Date.now() - started < 60_000) await new Promise((r) => setTimeout(r, 200));
      expect(restored!.alive()).toBe(false);
      const console_ = readFileSync(join(dir, 'busybox-restored.console.log'), 'utf8');
      expect(console_).toContain('envd-init: shutting down: stopping envd');
      expect(console_).toContain('envd-init: powering off');
      console.log(`busybox: powered off ${Date.now() - started} ms after poweroff`);
    });
  });
});
