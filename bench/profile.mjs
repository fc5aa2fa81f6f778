// `node bench/profile.mjs <figure> [--full]`: runs one figure (exec-latency,
// upload, http-floor, …) against an envd started with `node --cpu-prof`, then
// prints the functions that dominate envd's CPU time. The .cpuprofile stays in
// bench/results/ for a flame graph (Chrome DevTools, speedscope). Start-up is
// profiled by the profile of any run: its first ~200 ms are the boot.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync } from 'node:fs';
import { closeClient } from './lib/client.mjs';
import { summariseProfile } from './lib/cpu-profile.mjs';
import { ENVD_ENV, ENVD_JS, ENVD_NODE_FLAGS, freePort, makeEnvdDirs, ROOT, waitForHealth } from './lib/envd-process.mjs';

const figure = process.argv[2];
if (!figure || figure.startsWith('-')) {
  console.error('usage: node bench/profile.mjs <figure> [--full]   (figure: a bench/<figure>.mjs name)');
  process.exit(2);
}
const { run } = await import(`./${figure}.mjs`);
const out = `${ROOT}bench/results/profile-${figure}-${Date.now()}`;
mkdirSync(out, { recursive: true });
const port = await freePort();
const token = randomBytes(16).toString('hex');
const dirs = makeEnvdDirs();
const { stateDir, spoolDir } = dirs;
const child = spawn(process.execPath, [...ENVD_NODE_FLAGS, '--cpu-prof', `--cpu-prof-dir=${out}`, ENVD_JS, '--host', '127.0.0.1', '--port', String(port), '--log-level', 'warn', '--state-dir', stateDir, '--spool-dir', spoolDir], {
  env: { PATH: process.env.PATH, HOME: process.env.HOME, ...ENVD_ENV, ENVD_ACCESS_TOKEN: token },
  stdio: ['ignore', 'ignore', 'inherit'],
});
const exited = new Promise((resolve) => child.once('exit', resolve));
try {
  await waitForHealth(port, child);
  await run({ quick: !process.argv.includes('--full'), envd: { port, pid: child.pid, token, url: `http://127.0.0.1:${port}` } });
} finally {
  closeClient();
  child.kill('SIGTERM');
  await exited;
  dirs.remove();
}
for (const file of readdirSync(out)) console.log(summariseProfile(`${out}/${file}`));
