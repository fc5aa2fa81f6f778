// The soak (bench/soak.mjs) against envd inside the smallest VM it is meant
// for: builds the Debian guest image with this dist/envd (rootfs/build-image.sh),
// boots it under qemu with 512 MiB (TCG here: /dev/kvm does not accelerate),
// hands envd a token with /init, runs the soak against the forwarded port with
// the workload's files in the guest and every figure read inside it
// (bench/lib/soak-remote-probe.mjs), prints the guest's memory and OOM record,
// and shuts the VM down. The soak's verdict is this script's exit code.
//
//   npm run soak:guest -- --minutes 20 [--pace-ms 1000] [--memory-mib 512] [other soak options]
//
// --pace-ms (1000 by default here, 0 on the host) pauses each worker between
// operations. Under TCG on this shared 2-CPU machine the guest runs each
// operation in seconds, and the measurement alone (a `true` each second, the
// probe every 2 s) keeps its two emulated CPUs ~80 % busy: the soak's idle
// p99s are therefore timed with the probes running (soak.mjs), and the
// latency rule (p99 under load <= 10x that idle) is kept. Pacing changed
// little here (/health p99 under load 1.1-2.8 s at 250, 2,000, 5,000 and
// 60,000 ms): 1,000 keeps the workers from queueing on each other.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { ROOT } from './lib/envd-process.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';

const BOOT_TIMEOUT_MS = 300_000;
/** The workload's directory in the guest: the default user's, as a sandbox user's files are. */
const GUEST_DIR = '/home/user/soak';
const DEFAULT_PACE_MS = '1000';

const { values: opts, tokens } = parseArgs({
  options: { 'memory-mib': { type: 'string', default: '512' }, 'pace-ms': { type: 'string', default: DEFAULT_PACE_MS }, 'no-build': { type: 'boolean', default: false } },
  strict: false,
  tokens: true,
});
/** Every other option goes to the soak as given. */
const ownOptions = new Set(['memory-mib', 'pace-ms', 'no-build']);
const args = process.argv.slice(2);
const taken = new Set(tokens.filter((t) => t.kind === 'option' && ownOptions.has(t.name)).flatMap((t) => (t.value !== undefined && !t.inlineValue ? [t.index, t.index + 1] : [t.index])));
const passOn = args.filter((_, i) => !taken.has(i));

/** The guest suite's qemu and client helpers are TypeScript: esbuild (which builds envd) compiles them for this script. */
async function loadGuestHelpers(dir) {
  const { outputFiles } = await build({
    stdin: { contents: "export * from './test/guest/qemu.ts'; export * from './test/guest/client.ts'; export * from './test/guest/paths.ts';", resolveDir: ROOT, loader: 'ts' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    write: false,
    logLevel: 'error',
  });
  const file = join(dir, 'guest-helpers.mjs');
  writeFileSync(file, outputFiles[0].text);
  return import(file);
}

function runSoak(args) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'bench/soak.mjs'), ...args], { stdio: 'inherit' });
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

const dir = makeTempDir('guest-soak');
let vm;
process.once('exit', () => vm?.child.kill('SIGKILL'));
let code = 1;
try {
  if (!opts['no-build']) {
    execFileSync(join(ROOT, 'rootfs/build-image.sh'), { stdio: ['ignore', 'ignore', 'inherit'], cwd: ROOT });
    execFileSync(join(ROOT, 'rootfs/build-kernel.sh'), { stdio: ['ignore', 'ignore', 'inherit'], cwd: ROOT });
  }
  const guest = await loadGuestHelpers(dir);
  guest.createOverlay(guest.IMAGE_FILE, join(dir, 'disk.qcow2'));
  const started = performance.now();
  vm = await guest.startQemu({ disk: join(dir, 'disk.qcow2'), dir, name: 'soak', memoryMiB: Number(opts['memory-mib']) });
  await guest.waitForHealth(vm.url, BOOT_TIMEOUT_MS, vm.alive);
  const client = guest.createClient(vm.url);
  client.token = randomBytes(24).toString('hex');
  const init = await client.call('POST', '/init', { access_token: client.token, default_user: 'user', timestamp: new Date().toISOString() });
  if (init.status !== 204) throw new Error(`/init answered ${init.status}`);
  const pid = (await guest.run(client, 'pidof envd', { user: 'root' })).stdout.trim();
  const machine = await guest.run(client, 'free -m | sed -n 2p; nproc; uname -r', { user: 'root' });
  console.log(`guest: ${opts['memory-mib']} MiB VM up in ${((performance.now() - started) / 1000).toFixed(0)} s under ${guest.pickAccelerator().join(' ')}; envd pid ${pid}; free -m: ${machine.stdout.trim().replace(/\n/g, '; ')}`);

  code = await runSoak([...passOn, '--url', vm.url, '--token', client.token, '--pid', pid, '--dir', GUEST_DIR, '--user', 'user', '--pace-ms', opts['pace-ms']]);

  // What the guest's memory looked like, and whether its kernel killed anything.
  const after = await guest.run(client, 'free -m; echo "OOM kills: $(dmesg | grep -ci "out of memory\\|killed process")"; journalctl -u envd -p warning --no-pager | tail -20', { user: 'root' }).catch((error) => ({ stdout: `(no answer: ${error.message})` }));
  console.log(`guest after the soak:\n${after.stdout.trimEnd()}`);
} catch (error) {
  console.log(`guest-soak: ${error.stack ?? error.message}`);
  for (const log of ['soak.qemu.log', 'soak.console.log']) {
    const text = existsSync(join(dir, log)) ? readFileSync(join(dir, log), 'utf8') : '';
    console.log(`${log} (last lines):\n${text.split('\n').slice(-30).join('\n')}`);
  }
  code = 1;
} finally {
  await vm?.stop();
  removeTempDir(dir);
}
process.exit(code);
