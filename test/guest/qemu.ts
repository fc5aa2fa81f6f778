import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ENVD_PORT, findKernel } from './paths.js';
import { connectQmp, type Qmp } from './qmp.js';

export interface QemuGuest {
  url: string;
  /** The host URL of each of `extraPorts`, by guest port. */
  extraUrls: Record<number, string>;
  child: ChildProcess;
  qmp: Qmp;
  alive(): boolean;
  /** Stops the VM and writes its whole state (CPU, devices, memory) to a file. */
  saveState(file: string): Promise<void>;
  stop(): Promise<void>;
}

export interface QemuOptions {
  /** A qcow2 overlay over the cached image: the guest writes there, the image stays clean. */
  disk: string;
  dir: string;
  name: string;
  /** Where the guest's real-time clock starts, e.g. "2015-01-01". */
  rtcBase?: string;
  /** A state file written by saveState: the VM resumes from it instead of booting. */
  incoming?: string;
  /** The VM's memory in MiB (default 768). */
  memoryMiB?: number;
  /** More kernel command line (an image without systemd-networkd takes its network from ip=). */
  append?: string;
  /** Guest ports forwarded too (a second envd the test starts in the guest). */
  extraPorts?: number[];
  /** A virtio-balloon with free page reporting: the guest hands free memory back, and a memory image leaves it out. */
  balloon?: boolean;
}

/** KVM only where the CPU offers it to us; otherwise multi-threaded TCG. */
export function pickAccelerator(): string[] {
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  return /\b(vmx|svm)\b/.test(flags) ? ['-accel', 'kvm', '-cpu', 'host'] : ['-accel', 'tcg,thread=multi', '-cpu', 'max'];
}

export function createOverlay(image: string, overlay: string): void {
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', image, '-F', 'raw', overlay]);
}

async function findFreePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

export async function startQemu(options: QemuOptions): Promise<QemuGuest> {
  const port = await findFreePort();
  const extra: Array<[number, number]> = [];
  for (const guestPort of options.extraPorts ?? []) extra.push([guestPort, await findFreePort()]);
  const forwards = [[ENVD_PORT, port], ...extra].map(([guestPort, hostPort]) => `hostfwd=tcp:127.0.0.1:${hostPort}-:${guestPort}`).join(',');
  const { kernel, initrd } = findKernel();
  const qmpSocket = join(options.dir, `${options.name}.qmp`);
  // A restored VM must have the same devices as the one saved: these arguments are shared.
  const args = [
    '-M', 'pc', ...pickAccelerator(), '-smp', '2', '-m', String(options.memoryMiB ?? 768),
    '-display', 'none', '-no-reboot', '-nodefaults', '-serial', `file:${join(options.dir, `${options.name}.console.log`)}`,
    '-kernel', kernel, '-initrd', initrd,
    '-append', `console=ttyS0 root=/dev/vda rw quiet panic=-1 systemd.show_status=0${options.append ? ` ${options.append}` : ''}`,
    '-drive', `file=${options.disk},if=virtio,format=qcow2`,
    // restrict=on: the guest reaches nothing outside; only the forwarded envd port comes in.
    '-netdev', `user,id=n0,restrict=on,${forwards}`,
    '-device', 'virtio-net-pci,netdev=n0',
    ...(options.balloon ? ['-device', 'virtio-balloon-pci,free-page-reporting=on'] : []),
    '-rtc', `base=${options.rtcBase ?? 'utc'},clock=host`,
    '-qmp', `unix:${qmpSocket},server=on,wait=off`,
    ...(options.incoming ? ['-incoming', `exec:cat ${options.incoming}`] : []),
  ];
  const log = createWriteStream(join(options.dir, `${options.name}.qemu.log`));
  const child = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const alive = () => child.exitCode === null && child.signalCode === null;
  const qmp = await connectQmp(qmpSocket);
  let stopped: Promise<void> | undefined;

  return {
    url: `http://127.0.0.1:${port}`,
    extraUrls: Object.fromEntries(extra.map(([guestPort, hostPort]) => [guestPort, `http://127.0.0.1:${hostPort}`])),
    child,
    qmp,
    alive,
    async saveState(file) {
      await qmp.execute('stop');
      await qmp.execute('migrate', { uri: `exec:cat > ${file}` });
      for (;;) {
        const info = await qmp.execute('query-migrate');
        if (info.status === 'completed') return;
        if (info.status === 'failed' || info.status === 'cancelled') throw new Error(`migration ${info.status}: ${info['error-desc'] ?? ''}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    stop() {
      // Once: a test that swaps VMs may stop one that its boot's cleanup stops again.
      stopped ??= (async () => {
        if (alive()) {
          try {
            await Promise.race([qmp.execute('quit'), new Promise((r) => setTimeout(r, 2_000))]);
          } catch {
            // the socket closes as qemu quits
          }
        }
        qmp.close();
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
        if (alive()) child.kill('SIGKILL');
        await exited;
        log.end();
      })();
      return stopped;
    },
  };
}

/** After an incoming migration the VM waits, paused, until told to continue. */
export async function resumeIncoming(qmp: Qmp, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let status: string;
  while ((status = (await qmp.execute('query-status')).status) === 'inmigrate') {
    if (Date.now() > deadline) throw new Error('incoming migration did not complete');
    await new Promise((r) => setTimeout(r, 50));
  }
  if (status !== 'running') await qmp.execute('cont');
}
