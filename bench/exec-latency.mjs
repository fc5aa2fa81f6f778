// exec latency: sequential POST /commands {cmd:"true"} against spawning the same
// login-shell invocation from Node and waiting for it, one of each in turn.
import { postJson } from './lib/client.mjs';
import { atMost, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { COMMAND_USER, spawnLoginShell } from './lib/spawn-direct.mjs';
import { interleave, percentile } from './lib/stats.mjs';

const GOAL = atMost(1.3);

export async function run({ quick = false, envd } = {}) {
  const rounds = quick ? 100 : 400;
  const rows = await withEnvd(
    { envd },
    async (server) => {
      const timed = async (fn) => {
        const start = performance.now();
        await fn();
        return performance.now() - start;
      };
      const samples = await interleave({
        rounds,
        warmup: 5,
        minRounds: 20,
        budgetMs: quick ? 10_000 : 120_000,
        a: () =>
          timed(async () => {
            const result = await postJson(server, '/commands', { cmd: 'true', user: COMMAND_USER.name });
            if (result.exit_code !== 0) throw new Error(`true exited ${result.exit_code}: ${result.stderr}`);
          }),
        b: () => timed(() => spawnLoginShell('true')),
      });
      const note = `${samples.rounds} of each, interleaved`;
      return [
        makeRow({ name: 'exec latency p50', unit: 'ms', envd: percentile(samples.a, 0.5), baseline: percentile(samples.b, 0.5), goal: GOAL, note }),
        makeRow({ name: 'exec latency p99', unit: 'ms', envd: percentile(samples.a, 0.99), baseline: percentile(samples.b, 0.99), note }),
      ];
    },
    (why) => [missingRow({ name: 'exec latency p50', unit: 'ms', goal: GOAL, note: why }), missingRow({ name: 'exec latency p99', unit: 'ms', note: why })],
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
