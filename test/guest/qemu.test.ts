import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, run, waitForHealth, type EnvdClient } from './client.js';
import { IMAGE_FILE } from './paths.js';
import { createOverlay, resumeIncoming, startQemu, type QemuGuest } from './qemu.js';
import { readEvents } from '../helpers/sse.js';
import { registerScenario } from './scenario.js';

// Under TCG on two shared cores a Debian boot takes about a minute.
const BOOT_TIMEOUT_MS = 240_000;
const DAY_S = 86_400;

async function guestClockSkew(client: EnvdClient): Promise<number> {
  const { stdout } = await run(client, 'date +%s');
  return Number(stdout.trim()) - Date.now() / 1000;
}

describe('envd in a qemu VM booted from the ext4 image', () => {
  let dir: string;
  let vm: QemuGuest | undefined;
  let restored: QemuGuest | undefined;
  let client: EnvdClient;
  const firstToken = randomBytes(24).toString('hex');

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'envd-qemu-'));
    createOverlay(IMAGE_FILE, join(dir, 'disk.qcow2'));
    const started = Date.now();
    // The clock starts years off, as after a restore from an old snapshot.
    vm = await startQemu({ disk: join(dir, 'disk.qcow2'), dir, name: 'boot', rtcBase: '2015-01-01' });
    await waitForHealth(vm.url, BOOT_TIMEOUT_MS, vm.alive);
    console.log(`qemu: boot to first /health 200 in ${Date.now() - started} ms (${vm.child.spawnargs.includes('kvm') ? 'KVM' : 'TCG'})`);
    client = createClient(vm.url);
  });

  afterAll(async () => {
    await vm?.stop();
    await restored?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sets the guest clock from the /init timestamp', async () => {
    client.token = firstToken;
    expect((await client.call('POST', '/init', { access_token: firstToken })).status).toBe(204);
    const before = await guestClockSkew(client);
    console.log(`qemu: guest clock off by ${Math.round(before)} s before /init with a timestamp`);
    expect(Math.abs(before)).toBeGreaterThan(DAY_S);
    expect((await client.call('POST', '/init', { timestamp: new Date().toISOString() })).status).toBe(204);
    expect(Math.abs(await guestClockSkew(client))).toBeLessThan(5);
  });

  registerScenario(() => ({ client, name: 'qemu' }), firstToken);

  describe('snapshot and restore', () => {
    let pid = 0;
    /** A command followed before the snapshot, and the id of the last event its client got then. */
    let followed = { pid: 0, lastId: '', text: '' };
    const secondToken = randomBytes(24).toString('hex');

    it('saves the running VM with memory and resumes it in a new qemu', async () => {
      client.token = firstToken;
      const started = await client.json('POST', '/commands', { cmd: 'sleep 20; echo survived the restore', background: true });
      // Snapshot and restore go ahead even if the command could not start, so that they are measured.
      if (started.status === 200) pid = started.body.pid;
      // A client follows a command's output up to the snapshot, then loses its connection with the old VM.
      const printing = await client.json('POST', '/commands', { cmd: 'echo one; echo two; sleep 12; echo "after the restore"', background: true });
      if (printing.status === 200) {
        const abort = new AbortController();
        const events = readEvents(await client.call('GET', `/commands/${printing.body.pid}/stream`, undefined, { signal: abort.signal }), { ids: true });
        followed = { pid: printing.body.pid, lastId: '', text: '' };
        for await (const event of events) {
          if (event.event !== 'stdout') continue;
          followed = { ...followed, lastId: event.id!, text: followed.text + event.data.data };
          if (followed.text === 'one\ntwo\n') break;
        }
        abort.abort();
      }

      const stateFile = join(dir, 'vm.state');
      let t = Date.now();
      await vm!.saveState(stateFile);
      const saveMs = Date.now() - t;
      await vm!.stop();
      vm = undefined;
      console.log(`qemu: snapshot (stop + migrate to file) ${saveMs} ms, ${Math.round(statSync(stateFile).size / 2 ** 20)} MiB`);

      t = Date.now();
      restored = await startQemu({ disk: join(dir, 'disk.qcow2'), dir, name: 'restore', incoming: stateFile });
      await resumeIncoming(restored.qmp);
      await waitForHealth(restored.url, 60_000, restored.alive);
      console.log(`qemu: restore (new qemu, incoming state, cont) to first /health 200 in ${Date.now() - t} ms`);
      client = createClient(restored.url);
      expect(started.status, 'POST /commands background').toBe(200);
    });

    it('takes a new token and envs through /init and refuses the old token', async () => {
      client.token = firstToken;
      const init = await client.call('POST', '/init', { access_token: secondToken, envs: { FORK: 'second' }, timestamp: new Date().toISOString() });
      expect(init.status).toBe(204);
      expect((await client.call('GET', '/envs')).status).toBe(401);
      client.token = secondToken;
      expect((await client.json('GET', '/envs')).body).toEqual({ FORK: 'second' });
      expect((await run(client, 'echo "$FORK $GREETING"')).stdout).toBe('second \n');
      expect(Math.abs(await guestClockSkew(client))).toBeLessThan(5);
    });

    it('resumes the output of a command followed before the snapshot from the last event id: exactly the rest', async () => {
      expect(followed.lastId, 'the snapshot step did not follow a command').toBe('8-0');
      const resumed = readEvents(await client.call('GET', `/commands/${followed.pid}/stream`, undefined, { headers: { 'last-event-id': followed.lastId } }), { ids: true });
      let rest = '';
      for await (const event of resumed) if (event.event === 'stdout') rest += event.data.data;
      expect(rest).toBe('after the restore\n');
    });

    it('still tracks the background command started before the snapshot, and waits for it', async () => {
      expect(pid, 'the snapshot step did not start a command').toBeGreaterThan(0);
      const listed = await client.json('GET', '/commands');
      expect(listed.body.processes.map((p: { pid: number }) => p.pid)).toContain(pid);
      const waited = await client.json('GET', `/commands/${pid}/wait`);
      expect(waited.body).toMatchObject({ exit_code: 0, stdout: 'survived the restore\n' });
    });
  });
});
