// memory under use: an envd's RSS after 1,000 commands (8 at a time) and
// 100 watch open/close cycles, against its own idle RSS before them, read
// after a warm-up of 10 commands and one watch (see WARM_UP_COMMANDS).
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { postJson, RouteMissing } from './lib/client.mjs';
import { atMost, makeRow, missingRow, printRow, runIfMain } from './lib/figure.mjs';
import { rssBytes, startEnvd } from './lib/envd-process.mjs';
import { runConcurrently } from './lib/stats.mjs';
import { COMMAND_USER } from './lib/spawn-direct.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';
import { openWatch } from './lib/watch.mjs';

const GOAL = atMost(20, 'MiB');
const MIB = 1024 * 1024;
const WATCH_CYCLES = 100;
const SETTLE_MS = 1_000;
const NAME = 'memory under use (RSS growth)';
/**
 * Commands (and one watch) run before idle is read. The first ones pay
 * one-time costs that do not grow with use: V8 maps its optimising compilers'
 * code (~7 MiB of the node binary) the first time envd does heavy work, and
 * node:crypto loads with the first command id (~1.4 MiB). Until envd stopped
 * doing both at start, idle already held them; the note gives the fresh
 * start's RSS too.
 */
const WARM_UP_COMMANDS = 10;

const settle = () => new Promise((r) => setTimeout(r, SETTLE_MS));

/** Runs one part of the load; a missing route is noted instead of failing the figure. */
async function part(label, missing, body) {
  try {
    await body();
  } catch (error) {
    if (!(error instanceof RouteMissing)) throw error;
    missing.push(label);
  }
}

export async function run({ quick = false } = {}) {
  // The figure is 1,000 commands; --quick runs fewer where a login shell is slow, and says so.
  const commands = quick ? 100 : 1000;
  const dir = makeTempDir('memory');
  const server = await startEnvd();
  const missing = [];
  try {
    await settle();
    const fresh = rssBytes(server.pid);
    await part('warm-up', missing, async () => {
      await runConcurrently(WARM_UP_COMMANDS, 8, () => postJson(server, '/commands', { cmd: 'true', user: COMMAND_USER.name }));
      const watch = await openWatch(server, mkdtempSync(join(dir, 'warm-')));
      await watch.close();
    });
    await settle();
    const idle = rssBytes(server.pid);
    await part('POST /commands', missing, () =>
      runConcurrently(commands, 8, async () => {
        const result = await postJson(server, '/commands', { cmd: 'true', user: COMMAND_USER.name });
        if (result.exit_code !== 0) throw new Error(`true exited ${result.exit_code}`);
      }),
    );
    await part('POST /files/watch', missing, async () => {
      for (let i = 0; i < WATCH_CYCLES; i++) {
        const watch = await openWatch(server, mkdtempSync(join(dir, 'w-')));
        await watch.close();
      }
    });
    await settle();
    const after = rssBytes(server.pid);
    const note = `${commands} commands${quick ? ' (--quick; the full run does 1,000)' : ''}, ${WATCH_CYCLES} watch cycles; fresh start ${(fresh / MIB).toFixed(1)} MiB, idle after ${WARM_UP_COMMANDS} commands and a watch ${(idle / MIB).toFixed(1)} MiB → ${(after / MIB).toFixed(1)} MiB`;
    const ran = ['POST /commands', 'POST /files/watch'].filter((label) => !missing.includes(label));
    const row =
      ran.length === 0
        ? missingRow({ name: NAME, unit: 'MiB', goal: GOAL, note: 'routes missing' })
        : makeRow({ name: NAME, unit: 'MiB', envd: (after - idle) / MIB, baseline: idle / MIB, ratio: null, goal: GOAL, note: missing.length ? `${note}; not run: ${missing.join(', ')} (route missing)` : note });
    if (ran.length === 1) row.met = false;
    printRow(row);
    return [row];
  } finally {
    await server.stop();
    removeTempDir(dir);
  }
}

await runIfMain(import.meta.url, run);
