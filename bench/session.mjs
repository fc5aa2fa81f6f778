// Sessions (issue 40): the p50 round trip of `true` in a session against a
// fresh POST /commands of `true` (a login shell's start each time), one of each
// in turn; the same `true` in a POSIX sh session (dash here, as busybox's ash in
// a busybox image: the driver is the same POSIX loop), timed in the same rounds;
// and 1,000 sequential session commands, each checked.
import { postJson, send } from './lib/client.mjs';
import { atMost, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { COMMAND_USER } from './lib/spawn-direct.mjs';
import { interleave, percentile } from './lib/stats.mjs';

/** No shell start per command: a session command costs well under a third of a fresh one. */
const GOAL = atMost(0.3);
const SEQUENTIAL = 1_000;

export async function run({ quick = false, envd } = {}) {
  const rows = await withEnvd(
    { envd },
    async (server) => {
      const { id } = await postJson(server, '/sessions', { user: COMMAND_USER.name });
      const sh = await postJson(server, '/sessions', { user: COMMAND_USER.name, shell: 'sh' });
      try {
        const inSession = async (cmd, session = id) => {
          const result = await postJson(server, `/sessions/${session}/commands`, { cmd });
          if (result.exit_code !== 0) throw new Error(`${cmd} exited ${result.exit_code} in the session: ${result.stderr}`);
          return result;
        };
        const timed = async (fn) => {
          const start = performance.now();
          await fn();
          return performance.now() - start;
        };
        const shSamples = [];
        const samples = await interleave({
          rounds: quick ? 100 : 400,
          warmup: 5,
          minRounds: 20,
          budgetMs: quick ? 10_000 : 120_000,
          a: async () => {
            shSamples.push(await timed(() => inSession('true', sh.id)));
            return timed(() => inSession('true'));
          },
          b: () =>
            timed(async () => {
              const result = await postJson(server, '/commands', { cmd: 'true', user: COMMAND_USER.name });
              if (result.exit_code !== 0) throw new Error(`true exited ${result.exit_code}: ${result.stderr}`);
            }),
        });
        const count = quick ? SEQUENTIAL / 4 : SEQUENTIAL;
        const started = performance.now();
        for (let i = 0; i < count; i++) {
          const { stdout } = await inSession(`n=$((\${n:-0}+1)); echo $n`);
          if (stdout !== `${i + 1}\n`) throw new Error(`session command ${i + 1} answered ${JSON.stringify(stdout)}: the state did not carry`);
        }
        const perCommand = (performance.now() - started) / count;
        return [
          makeRow({ name: 'session command p50', unit: 'ms', envd: percentile(samples.a, 0.5), baseline: percentile(samples.b, 0.5), goal: GOAL, note: `${samples.rounds} of each, interleaved; baseline: a fresh POST /commands` }),
          makeRow({ name: 'session command p99', unit: 'ms', envd: percentile(samples.a, 0.99), baseline: percentile(samples.b, 0.99), note: 'baseline: a fresh POST /commands' }),
          makeRow({ name: 'session command p50, sh (dash)', unit: 'ms', envd: percentile(shSamples.slice(-samples.rounds), 0.5), baseline: percentile(samples.b, 0.5), goal: GOAL, note: `shell "sh" in the same rounds; baseline: a fresh POST /commands` }),
          makeRow({ name: `${count} sequential session commands`, unit: 'ms/command', envd: perCommand, note: `${(perCommand * count / 1000).toFixed(1)} s in all, each checked` }),
        ];
      } finally {
        await send(server, 'DELETE', `/sessions/${id}`);
        await send(server, 'DELETE', `/sessions/${sh.id}`);
      }
    },
    (why) => [missingRow({ name: 'session command p50', unit: 'ms', goal: GOAL, note: why })],
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
