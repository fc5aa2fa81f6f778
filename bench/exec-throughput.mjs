// exec throughput: commands per second with 8 in flight, POST /commands
// {cmd:"true"} against direct spawns of the same login shell, batch by batch in turn.
import { postJson } from './lib/client.mjs';
import { atLeast, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { COMMAND_USER, spawnLoginShell } from './lib/spawn-direct.mjs';
import { interleave, median, runConcurrently } from './lib/stats.mjs';

const GOAL = atLeast(0.8);
const CONCURRENCY = 8;

/** Runs `count` tasks 8 at a time and returns how many finished per second. */
async function ratePerSecond(count, task) {
  const start = performance.now();
  await runConcurrently(count, CONCURRENCY, task);
  return count / ((performance.now() - start) / 1000);
}

export async function run({ quick = false, envd } = {}) {
  const rounds = quick ? 3 : 8;
  const perBatch = quick ? 16 : 64;
  const rows = await withEnvd(
    { envd },
    async (server) => {
      const samples = await interleave({
        rounds,
        warmup: 1,
        minRounds: 2,
        budgetMs: quick ? 10_000 : 120_000,
        a: () => ratePerSecond(perBatch, () => postJson(server, '/commands', { cmd: 'true', user: COMMAND_USER.name })),
        b: () => ratePerSecond(perBatch, () => spawnLoginShell('true')),
      });
      const note = `${samples.rounds} batches of ${perBatch} per side, concurrency ${CONCURRENCY}, median batch`;
      return [makeRow({ name: 'exec throughput', unit: 'cmd/s', envd: median(samples.a), baseline: median(samples.b), goal: GOAL, note })];
    },
    (why) => [missingRow({ name: 'exec throughput', unit: 'cmd/s', goal: GOAL, note: why })],
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
