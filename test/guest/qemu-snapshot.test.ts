import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, run, waitForHealth, type EnvdClient } from './client.js';
import { IMAGE_FILE } from './paths.js';
import { createOverlay, resumeIncoming, startQemu, type QemuGuest } from './qemu.js';

// Issue 41 on a real kernel: POST /snapshot/prepare before qemu saves the VM
// (stop + migrate to a file, as the service's pause does), /init after a
// restore, forks restored from one snapshot. The VM has a virtio-balloon with
// free page reporting, so the page cache that prepare drops leaves the image.
// FIFREEZE runs only here, in the guest.

const BOOT_TIMEOUT_MS = 240_000;
const MiB = 1024 * 1024;
const CACHE_MiB = 256;
/** Free page reporting hands free 2 MiB blocks to the host 2 s after they became free (PAGE_REPORTING_DELAY). */
const REPORTING_WAIT_MS = 6_000;

const asRoot = { user: 'root' };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('snapshots prepared by envd (qemu, Debian image, virtio-balloon with free page reporting)', () => {
  let dir: string;
  let vm: QemuGuest | undefined;
  let client: EnvdClient;
  let restores = 0;
  const token = randomBytes(24).toString('hex');
  const figures: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'envd-qemu-snapshot-'));
    createOverlay(IMAGE_FILE, join(dir, 'disk.qcow2'));
    vm = await startQemu({ disk: join(dir, 'disk.qcow2'), dir, name: 'boot', balloon: true });
    await waitForHealth(vm.url, BOOT_TIMEOUT_MS, vm.alive);
    client = createClient(vm.url);
    client.token = token;
    expect((await client.call('POST', '/init', { access_token: token, timestamp: new Date().toISOString() })).status).toBe(204);
  });

  afterAll(async () => {
    await vm?.stop();
    console.log(`qemu-snapshot figures:\n  ${figures.join('\n  ')}`);
    rmSync(dir, { recursive: true, force: true });
  });

  /** Saves the running VM to a file, as a pause does: its size and how long it took. */
  async function save(name: string): Promise<{ file: string; bytes: number; saveMs: number }> {
    const file = join(dir, `${name}.state`);
    const started = Date.now();
    await vm!.saveState(file);
    const saveMs = Date.now() - started;
    await vm!.stop();
    vm = undefined;
    return { file, bytes: statSync(file).size, saveMs };
  }

  /** A new qemu resumed from `state` on `disk` (the VM's own overlay, or a fork's copy of it): ms to its first /health. */
  async function restore(state: string, disk = join(dir, 'disk.qcow2')): Promise<number> {
    const started = Date.now();
    vm = await startQemu({ disk, dir, name: `restore-${++restores}`, incoming: state, balloon: true });
    await resumeIncoming(vm.qmp);
    await waitForHealth(vm.url, 60_000, vm.alive);
    client = createClient(vm.url);
    client.token = token;
    return Date.now() - started;
  }

  const prepare = async (body: Record<string, unknown>) => {
    const { status, body: answer } = await client.json('POST', '/snapshot/prepare', body);
    expect(status, JSON.stringify(answer)).toBe(200);
    return answer;
  };
  const stdoutOf = async (pid: number) => (await (await client.call('GET', `/commands/${pid}/output?stream=stdout`)).text()).trim().split('\n');

  it('leaves the page cache it dropped out of the memory image: at least 200 MiB smaller', async () => {
    const balloon = await run(client, 'ls /sys/bus/virtio/drivers/virtio_balloon | grep -c virtio', asRoot);
    expect(balloon.stdout.trim(), 'the guest has no virtio_balloon driver').not.toBe('0');
    await run(client, `head -c ${CACHE_MiB}M /dev/urandom > /var/tmp/cache.bin && sync && cat /var/tmp/cache.bin > /dev/null`, asRoot);

    const plain = await save('plain');
    const plainRestoreMs = await restore(plain.file);
    const cached = Number(/^Cached:\s+(\d+)/m.exec((await run(client, 'cat /proc/meminfo')).stdout)?.[1]) / 1024;
    const answer = await prepare({ freeze: 'none', drop_caches: true });
    await sleep(REPORTING_WAIT_MS);
    const prepared = await save('prepared');
    const preparedRestoreMs = await restore(prepared.file);
    expect((await client.call('POST', '/init', { timestamp: new Date().toISOString() })).status).toBe(204);

    figures.push(
      `memory image, ${CACHE_MiB} MiB of files read (page cache ${cached.toFixed(0)} MiB before prepare): plain ${(plain.bytes / MiB).toFixed(0)} MiB (save ${plain.saveMs} ms, restore ${plainRestoreMs} ms); ` +
        `after prepare {drop_caches} ${(prepared.bytes / MiB).toFixed(0)} MiB (save ${prepared.saveMs} ms, restore ${preparedRestoreMs} ms); saved ${((plain.bytes - prepared.bytes) / MiB).toFixed(0)} MiB; ` +
        `dropped_bytes ${(answer.dropped_bytes / MiB).toFixed(0)} MiB, prepare ${answer.took_ms} ms`,
    );
    expect(plain.bytes - prepared.bytes).toBeGreaterThan(200 * MiB);
  });

  it('freezes a 10 ms timestamp printer within 100 ms; after the restore it prints nothing until /init, then the new time', async () => {
    const started = await client.json('POST', '/commands', { cmd: 'while :; do date +%s%3N; sleep 0.01; done', background: true });
    expect(started.status).toBe(200);
    const pid: number = started.body.pid;
    await sleep(1_000);
    const answer = await prepare({ freeze: 'commands' });
    expect(answer).toMatchObject({ frozen: 1, unconfirmed: 0 });
    // A new command would be born frozen: refused while the commands are.
    expect((await client.json('POST', '/commands', { cmd: 'true' })).status).toBe(409);
    // Output the printer wrote before the freeze may still be on its way to the holder: read it once it has settled.
    await sleep(500);
    const frozenLines = await stdoutOf(pid);
    const last = Number(frozenLines.at(-1));
    await sleep(500);
    expect(await stdoutOf(pid)).toEqual(frozenLines);

    const state = await save('quiesced');
    await sleep(3_000); // the host's time moves on while the sandbox is paused
    await restore(state.file);
    await sleep(1_000);
    expect(await stdoutOf(pid), 'the printer ran before /init').toEqual(frozenLines);
    const initAt = Date.now();
    expect((await client.call('POST', '/init', { timestamp: new Date().toISOString() })).status).toBe(204);
    await sleep(500);
    const after = await stdoutOf(pid);
    // When prepare arrived, by the guest's clock before the snapshot: envd's request line (journald) says when it answered and how long it took.
    const logged = (await run(client, 'journalctl -u envd -o cat | grep \'"url":"/snapshot/prepare"\' | tail -1', asRoot)).stdout;
    const { time, ms } = JSON.parse(logged) as { time: string; ms: number };
    const lagMs = last - (Date.parse(time) - ms);
    figures.push(`quiesce: the printer's last line ${lagMs} ms after prepare arrived (took_ms ${answer.took_ms}, synced_ms ${answer.synced_ms})`);
    expect(lagMs).toBeLessThan(100);
    const first = Number(after[frozenLines.length]);
    figures.push(`after restore: first line ${first - initAt} ms from /init's timestamp; the stale clock would have said ${last + 10 - initAt} ms`);
    expect(first).toBeGreaterThanOrEqual(initAt - 1_000);
    expect(first - last).toBeGreaterThan(3_000);
    await client.call('DELETE', `/commands/${pid}`);
  });

  it('thaws by itself after thaw_after_ms when neither /init nor a thaw comes', async () => {
    const started = await client.json('POST', '/commands', { cmd: 'while :; do date +%s%3N; sleep 0.01; done', background: true });
    const pid: number = started.body.pid;
    await sleep(1_000);
    await prepare({ freeze: 'commands', thaw_after_ms: 2_000 });
    // Lines written just before the freeze may still reach the holder: count once they have settled.
    await sleep(300);
    const frozen = (await stdoutOf(pid)).length;
    await sleep(500);
    expect((await stdoutOf(pid)).length).toBe(frozen);
    // Thawed 2 s after the answer, 0.8 s of which have passed; a line takes ~0.1 s under TCG (a date per line).
    await sleep(3_500);
    expect((await stdoutOf(pid)).length).toBeGreaterThan(frozen + 3);
    expect((await client.json('POST', '/snapshot/thaw')).body).toEqual({ thawed: 0, fs_thawed: [], by: 'request' });
    await client.call('DELETE', `/commands/${pid}`);
  });

  it('freezes the filesystems: a disk copied meanwhile fscks clean and holds every record written before, whole', async () => {
    const writer = await client.json('POST', '/commands', {
      cmd: 'i=0; while :; do printf "%04095d\\n" $i | dd of=/var/tmp/records bs=4096 iflag=fullblock oflag=append conv=notrunc,fsync status=none; i=$((i+1)); done',
      background: true,
      user: 'root',
    });
    expect(writer.status).toBe(200);
    await sleep(1_500);
    const answer = await prepare({ freeze: 'none', fsfreeze: true });
    expect(answer.fs_frozen).toContain('/');
    expect((await client.json('GET', '/health')).status).toBe(200);
    const copy = join(dir, 'frozen.qcow2');
    copyFileSync(join(dir, 'disk.qcow2'), copy);
    expect((await client.json('POST', '/snapshot/thaw')).body).toMatchObject({ fs_thawed: expect.arrayContaining(['/']) });
    await client.call('DELETE', `/commands/${writer.body.pid}`);

    const raw = join(dir, 'frozen.raw');
    execFileSync('qemu-img', ['convert', '-U', '-O', 'raw', copy, raw]);
    const fsck = execFileSync('fsck.ext4', ['-n', '-f', raw], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    const records = execFileSync('debugfs', ['-R', 'cat /var/tmp/records', raw], { stdio: ['ignore', 'pipe', 'ignore'], maxBuffer: 1 << 30 });
    rmSync(raw);
    expect(records.length % 4096).toBe(0);
    const count = records.length / 4096;
    expect(count).toBeGreaterThan(0);
    for (let i = 0; i < count; i++) expect(records.subarray(i * 4096, (i + 1) * 4096).toString(), `record ${i}`).toBe(`${String(i).padStart(4095, '0')}\n`);
    figures.push(`fsfreeze: ${count} whole records in the copy, fsck -n: ${fsck.trim().split('\n').at(-1)}`);
  });

  it('prints what prepare takes: no freeze, freeze, fsfreeze (median of 3)', async () => {
    const sleepers = await Promise.all([1, 2, 3].map(() => client.json('POST', '/commands', { cmd: 'sleep 600', background: true })));
    const median = async (body: Record<string, unknown>) => {
      const answers: Array<{ took_ms: number; synced_ms: number; envd_rss_before: number; envd_rss_after: number }> = [];
      for (let i = 0; i < 3; i++) {
        answers.push(await prepare(body));
        await client.json('POST', '/snapshot/thaw');
      }
      const middle = answers.sort((a, b) => a.took_ms - b.took_ms)[1]!;
      return `${middle.took_ms} ms (sync ${middle.synced_ms} ms, envd RSS ${(middle.envd_rss_before / MiB).toFixed(1)} → ${(middle.envd_rss_after / MiB).toFixed(1)} MiB)`;
    };
    const none = await median({ freeze: 'none' });
    const freeze = await median({ freeze: 'commands' });
    const fsfreeze = await median({ freeze: 'commands', fsfreeze: true });
    figures.push(`prepare, median of 3 with 3 commands running: no freeze ${none}; freeze ${freeze}; freeze + fsfreeze ${fsfreeze}`);
    for (const sleeper of sleepers) await client.call('DELETE', `/commands/${sleeper.body.pid}`);
  });

  it('forks restored from one snapshot differ with entropy, hostname and machine_id; without entropy they share the random state', async () => {
    const counter = await client.json('POST', '/commands', { cmd: 'i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done', background: true, user: 'root' });
    expect(counter.status).toBe(200);
    await sleep(500);
    await prepare({ freeze: 'commands' });
    const state = await save('fork');
    const probe = 'cat /proc/sys/kernel/random/uuid; head -c 32 /dev/urandom | od -An -tx1 | tr -d " \\n"; echo; hostname; cat /etc/machine-id; cat /tmp/counter; sleep 0.5; cat /tmp/counter';
    const forks: Array<{ uuid: string; urandom: string; hostname: string; machineId: string; counting: boolean }> = [];
    const ids: string[] = [];
    for (const [name, identity] of [
      ['a', true],
      ['b', true],
      ['c', false],
      ['d', false],
    ] as const) {
      const disk = join(dir, `fork-${name}.qcow2`);
      copyFileSync(join(dir, 'disk.qcow2'), disk);
      await restore(state.file, disk);
      const machineId = randomBytes(16).toString('hex');
      ids.push(machineId);
      const body = { timestamp: new Date().toISOString(), ...(identity ? { entropy: randomBytes(64).toString('base64'), hostname: `fork-${name}`, machine_id: machineId } : {}) };
      expect((await client.call('POST', '/init', body)).status).toBe(204);
      const [uuid, urandom, hostname, id, count1, count2] = (await run(client, probe, asRoot)).stdout.trim().split('\n');
      forks.push({ uuid: uuid!, urandom: urandom!, hostname: hostname!, machineId: id!, counting: Number(count2) > Number(count1) });
      await vm!.stop();
      vm = undefined;
      rmSync(disk);
    }
    const [a, b, c, d] = forks as [(typeof forks)[0], (typeof forks)[0], (typeof forks)[0], (typeof forks)[0]];
    const shared = (x: typeof a, y: typeof a) => (['uuid', 'urandom', 'hostname', 'machineId'] as const).filter((key) => x[key] === y[key]);
    // Without entropy what they share depends on the kernel: its generator reseeds from the pool (and each fork's own interrupt timings)
    // once a minute has passed since its last reseed, so uuid and urandom are the same only in the minute after one.
    figures.push(`forks with entropy, hostname, machine_id share: [${shared(a, b).join(', ')}]; forks with only a timestamp share: [${shared(c, d).join(', ')}]`);
    expect(shared(a, b)).toEqual([]);
    expect([a.hostname, b.hostname, a.machineId, b.machineId]).toEqual(['fork-a', 'fork-b', ids[0], ids[1]]);
    expect(forks.map((fork) => fork.counting)).toEqual([true, true, true, true]);
  });
});
