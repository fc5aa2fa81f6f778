// Re-adoption after a crash: 1,000 running background commands, envd killed with
// SIGKILL, a new envd started on the same state directory; the time from its exec
// to its first /health 200 (it re-adopts every command before it listens), against
// a fresh envd's start-up with nothing to re-adopt. Goal: under a second.
// Then, reported: SIGTERM to that envd, which kills all 1,000, until it exits.
import { readFileSync } from 'node:fs';
import { postJson, send } from './lib/client.mjs';
import { atMost, makeRow, printRow, runIfMain } from './lib/figure.mjs';
import { startEnvd } from './lib/envd-process.mjs';
import { runConcurrently } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';

const GOAL = atMost(1000, 'ms');
// Commands run as a plain user: root's login shell here runs pyenv's rehash under a lock (README, Performance).
const BENCH_USER = 'nobody';

export async function run({ quick = false } = {}) {
  const count = quick ? 200 : 1000;
  const root = makeTempDir('readopt');
  const dirs = { stateDir: `${root}/state`, spoolDir: `${root}/spool` };
  const token = 'bench-readopt';
  let envd = await startEnvd({ dirs, token });
  const rows = [];
  try {
    const fresh = envd.startMs;
    const pids = new Set();
    await runConcurrently(count, 8, async () => pids.add((await postJson(envd, '/commands', { cmd: 'exec sleep 1000', background: true, user: BENCH_USER })).pid));
    await envd.stop('SIGKILL');
    envd = await startEnvd({ dirs, token });
    const { processes } = JSON.parse((await send(envd, 'GET', '/commands')).body);
    const adopted = processes.filter((p) => pids.has(p.pid) && p.running).length;
    if (adopted !== count) throw new Error(`re-adopted ${adopted} of ${count} commands`);
    rows.push(makeRow({ name: `restart re-adopting ${count} commands`, unit: 'ms', envd: envd.startMs, baseline: fresh, goal: GOAL, note: `${count} running commands${quick ? ' (--quick; the full run has 1,000)' : ''}, all listed again; baseline: the same envd's first start with none` }));
    // Then SIGTERM, which kills them all: the time until envd has exited.
    const stopping = performance.now();
    await envd.stop('SIGTERM');
    const shutdownMs = performance.now() - stopping;
    const left = [...pids].filter(isSleeping);
    left.forEach((pid) => process.kill(pid, 'SIGKILL'));
    rows.push(makeRow({ name: `shutdown with ${count} commands running`, unit: 'ms', envd: shutdownMs, note: `SIGTERM → envd exited; ${left.length === 0 ? 'none of the commands left running' : `${left.length} left running (killed by the bench)`}` }));
  } finally {
    await envd.stop();
    removeTempDir(root);
  }
  rows.forEach(printRow);
  return rows;
}

/** The bench's `sleep` still holds this pid (not some later process that reused it). */
function isSleeping(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('sleep');
  } catch {
    return false;
  }
}

await runIfMain(import.meta.url, run);
