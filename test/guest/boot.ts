// One boot for a guest test file: an overlay over the image, qemu, the first
// /health, and (unless told not to) /init with a fresh access token. The guest
// files repeated these steps each; their differences are the options.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, waitForHealth, type EnvdClient } from './client.js';
import { createOverlay, startQemu, type QemuGuest } from './qemu.js';

/** busybox boots to envd in ~10-60 s under TCG; a loaded CI machine takes longer. */
const BOOT_TIMEOUT_MS = 180_000;

/** The kernel's ip= for an image with no network manager (busybox + musl), as Firecracker passes it. */
export function staticNetwork(hostname: string): string {
  return `ip=10.0.2.15::10.0.2.2:255.255.255.0:${hostname}:eth0:off`;
}

export interface BootOptions {
  /** The raw image the overlay covers, or a function that makes one in the test's directory. */
  image: string | ((dir: string) => string);
  /** Names the directory, the logs and the QMP socket. */
  name: string;
  memoryMiB?: number;
  append?: string;
  extraPorts?: number[];
  balloon?: boolean;
  /** How long the first /health may take (default BOOT_TIMEOUT_MS; a systemd image takes longer). */
  bootTimeoutMs?: number;
  /** More fields for /init, or false to leave /init to the test (the token is then not set on the client). */
  init?: Record<string, unknown> | false;
}

export interface BootedGuest {
  dir: string;
  vm: QemuGuest;
  client: EnvdClient;
  /** The access token /init was given (or is to be given, when init is false). */
  token: string;
  /** qemu's start to envd's first /health 200. */
  bootMs: number;
  /** Stops the VM and removes the directory. */
  stop(): Promise<void>;
}

export async function bootGuest(options: BootOptions): Promise<BootedGuest> {
  const dir = mkdtempSync(join(tmpdir(), `envd-qemu-${options.name}-`));
  let vm: QemuGuest | undefined;
  const stop = async () => {
    await vm?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const image = typeof options.image === 'string' ? options.image : options.image(dir);
    createOverlay(image, join(dir, 'disk.qcow2'));
    const started = Date.now();
    vm = await startQemu({ disk: join(dir, 'disk.qcow2'), dir, name: options.name, memoryMiB: options.memoryMiB ?? 512, append: options.append, extraPorts: options.extraPorts, balloon: options.balloon });
    await waitForHealth(vm.url, options.bootTimeoutMs ?? BOOT_TIMEOUT_MS, vm.alive).catch((error: Error) => {
      throw new Error(`${error.message}\nqemu: ${tail(join(dir, `${options.name}.qemu.log`))}\nconsole: ${tail(join(dir, `${options.name}.console.log`))}`);
    });
    const bootMs = Date.now() - started;
    const client = createClient(vm.url);
    const token = randomBytes(24).toString('hex');
    if (options.init !== false) {
      const response = await client.call('POST', '/init', { access_token: token, timestamp: new Date().toISOString(), ...options.init });
      if (response.status !== 204) throw new Error(`POST /init answered ${response.status}: ${await response.text()}`);
      client.token = token;
    }
    return { dir, vm, client, token, bootMs, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').slice(-2000);
  } catch {
    return '(none)';
  }
}
