// The probes of bench/load-latency.mjs, in a process of their own: timed from
// the load generator's event loop, which runs hundreds of transfers, they
// measured its delays as well as envd's (tens to hundreds of ms at p99).
// Run as `node latency-probes.mjs URL TOKEN USER BARE_URL`; on SIGTERM prints
// {"health":[ms...],"command":[ms...],"bare":[ms...],"bareHealth":[ms...]} and exits.
// The baselines, in the same window: `bare` spawns the login shell a command
// runs in; `bareHealth` asks a bare fastify app's /health (bench/lib/bare-fastify.mjs),
// which no load reaches, so that what the machine's load costs any server is told
// from what envd's own load costs.
import { spawnLoginShell } from './spawn-direct.mjs';

const [url, token, user, bareUrl] = process.argv.slice(2);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const latencies = { health: [], command: [], bare: [], bareHealth: [] };
let probing = true;

async function time(kind) {
  if (kind === 'bare') return spawnLoginShell('true');
  if (kind === 'bareHealth') return (await fetch(`${bareUrl}/health`)).arrayBuffer();
  const init = kind === 'health'
    ? { method: 'GET' }
    : { method: 'POST', body: JSON.stringify({ cmd: 'true', user }), headers: { 'content-type': 'application/json' } };
  const response = await fetch(`${url}${kind === 'health' ? '/health' : '/commands'}`, { ...init, headers: { authorization: `Bearer ${token}`, ...init.headers } });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`${kind} answered ${response.status}`);
}

async function loop(kind, everyMs) {
  while (probing) {
    const started = performance.now();
    await time(kind);
    latencies[kind].push(performance.now() - started);
    await sleep(everyMs);
  }
}

// One of each first, untimed: envd's first command starts its holder spawner and compiles the route's code,
// once per envd, not per command. With ~90 commands a run the nearest-rank p99 is the slowest sample, and it
// was often this first one (timed inside envd: 50-90 ms of start-up cost before the load had begun).
for (const kind of ['health', 'command', 'bare', 'bareHealth']) await time(kind);
const loops = [loop('health', 50), loop('command', 200), loop('bare', 200), loop('bareHealth', 50)];
process.once('SIGTERM', async () => {
  probing = false;
  await Promise.all(loops);
  process.stdout.write(JSON.stringify(latencies));
  process.exit(0);
});
process.stdout.write('ready\n');
