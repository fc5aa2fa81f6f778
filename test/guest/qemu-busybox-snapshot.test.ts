// Issue 41 on the busybox + musl image (envd-init as PID 1, envd in the root
// cgroup, no systemd, no trust store): prepare freezes and /init thaws,
// FIFREEZE of the root, a fork's identity and CA bundle, forks that differ.
import { randomBytes } from 'node:crypto';
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootGuest, staticNetwork, type BootedGuest } from './boot.js';
import { createClient, run, waitForHealth, type EnvdClient } from './client.js';
import { BUSYBOX_IMAGE_FILE } from './paths.js';
import { resumeIncoming, startQemu, type QemuGuest } from './qemu.js';

const NETWORK = staticNetwork('envd-busybox');
const asRoot = { user: 'root' };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A throwaway self-signed CA (as in test/lifecycle/identity.test.ts). */
const CA = `-----BEGIN CERTIFICATE-----
MIIBhTCCASugAwIBAgIUc2utqDGD4qy7VdndAttYdaPWBsEwCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZW52ZC10ZXN0LWNhMCAXDTI2MTEyNjA5MDAwN1oYDzIxMjYx
MTAyMDkwMDA3WjAXMRUwEwYDVQQDDAxlbnZkLXRlc3QtY2EwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAASA2We09/KPkx4HfAj0wUI60oTfSxPHAHui3Z7xChQGszC/
sziLl0pmv757/R3Fe+eRBC+RH0aEXdZzr9JbrpH4o1MwUTAdBgNVHQ4EFgQURCu9
Wt1yYE+mx3l8Ya1XMtOCsn0wHwYDVR0jBBgwFoAURCu9Wt1yYE+mx3l8Ya1XMtOC
sn0wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAiTGbp9/x23ZN
i7AaQCichkEDd7BchIPcxDvaqCu7huwCIGXyCUzaIx6bXuarxK0k5PaVtFdFX9Q1
kvYWOGT2WSWo
-----END CERTIFICATE-----`;

describe('snapshots prepared by envd on a busybox + musl image (envd-init as PID 1)', () => {
  let guest: BootedGuest | undefined;
  /** The running VM: the first boot's, then each restored fork's. */
  let vm: QemuGuest | undefined;
  let dir: string;
  let token: string;
  let client: EnvdClient;
  let restores = 0;

  beforeAll(async () => {
    guest = await bootGuest({ image: BUSYBOX_IMAGE_FILE, name: 'busybox', append: NETWORK, balloon: true });
    ({ vm, dir, token, client } = guest);
  });

  afterAll(async () => {
    await vm?.stop();
    await guest?.stop();
  });

  // Read through the files API: a command would be refused (409) while the commands are frozen.
  const counter = async () => Number(await (await client.call('GET', '/files/raw?path=/tmp/counter')).text());

  it('freezes the commands (cgroup v2 under envd-init) until /init, which gives the sandbox its identity and CA bundle', async () => {
    const started = await client.json('POST', '/commands', { cmd: 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.05; done', background: true, user: 'root' });
    expect(started.status).toBe(200);
    await sleep(1_000);
    const prepared = await client.json('POST', '/snapshot/prepare', { freeze: 'commands', drop_caches: true });
    expect(prepared.status, JSON.stringify(prepared.body)).toBe(200);
    expect(prepared.body).toMatchObject({ frozen: 1, unconfirmed: 0 });
    const frozen = await counter();
    await sleep(500);
    expect(await counter()).toBe(frozen);

    const machineId = randomBytes(16).toString('hex');
    const init = await client.call('POST', '/init', { timestamp: new Date().toISOString(), entropy: randomBytes(32).toString('base64'), hostname: 'busybox-fork', machine_id: machineId, ca_bundle: CA });
    expect(init.status).toBe(204);
    await sleep(500);
    expect(await counter()).toBeGreaterThan(frozen);
    const identity = await run(client, 'hostname; cat /etc/hostname /etc/machine-id; echo "$SSL_CERT_FILE"; grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE"', asRoot);
    expect(identity.stdout).toBe(`busybox-fork\nbusybox-fork\n${machineId}\n/etc/ssl/certs/ca-certificates.crt\n1\n`);
    await client.call('DELETE', `/commands/${started.body.pid}`);
  });

  it('freezes the root filesystem while /health answers, and thaws it', async () => {
    const prepared = await client.json('POST', '/snapshot/prepare', { freeze: 'none', fsfreeze: true });
    expect(prepared.body.fs_frozen).toEqual(['/']);
    expect((await client.json('GET', '/health')).status).toBe(200);
    expect((await client.json('POST', '/snapshot/thaw')).body).toEqual({ thawed: 0, fs_thawed: ['/'], by: 'request' });
    expect((await run(client, 'echo written > /root/after-thaw && cat /root/after-thaw', asRoot)).stdout).toBe('written\n');
  });

  it('restores two forks of one snapshot that differ in random state, hostname and machine-id', async () => {
    await client.json('POST', '/snapshot/prepare', { freeze: 'all' });
    const state = join(dir, 'fork.state');
    await vm!.saveState(state);
    await vm!.stop();
    vm = undefined;
    const seen: string[][] = [];
    for (const name of ['a', 'b']) {
      const disk = join(dir, `fork-${name}.qcow2`);
      copyFileSync(join(dir, 'disk.qcow2'), disk);
      vm = await startQemu({ disk, dir, name: `fork-${name}-${++restores}`, memoryMiB: 512, append: NETWORK, balloon: true, incoming: state });
      await resumeIncoming(vm.qmp);
      await waitForHealth(vm.url, 60_000, vm.alive);
      client = createClient(vm.url);
      client.token = token;
      const body = { timestamp: new Date().toISOString(), entropy: randomBytes(64).toString('base64'), hostname: `fork-${name}`, machine_id: randomBytes(16).toString('hex') };
      expect((await client.call('POST', '/init', body)).status).toBe(204);
      seen.push((await run(client, 'cat /proc/sys/kernel/random/uuid; head -c 32 /dev/urandom | od -An -tx1 | tr -d " \\n"; echo; hostname; cat /etc/machine-id', asRoot)).stdout.trim().split('\n'));
      await vm.stop();
      vm = undefined;
      rmSync(disk);
    }
    const [a, b] = seen as [string[], string[]];
    expect(a).toHaveLength(4);
    a.forEach((value, i) => expect(value, `field ${i}`).not.toBe(b[i]));
  });
});
