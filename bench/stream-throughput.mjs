// stream throughput: MB/s of a command's stdout through POST /commands/stream,
// read and decoded event by event by a client, against the same command's
// stdout pipe read directly in Node. `yes` prints "y\n": ASCII, so the JSON
// escaping envd must do stays modest (3 bytes on the wire per 2 of output)
// where /dev/zero would be all \u0000 escapes.
import { readSse, send } from './lib/client.mjs';
import { atLeast, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { spawnLoginShell } from './lib/spawn-direct.mjs';
import { interleave, median } from './lib/stats.mjs';

const GOAL = atLeast(0.6);
const MB = 1e6;

async function streamThroughEnvd(server, cmd, bytes) {
  const start = performance.now();
  const res = await send(server, 'POST', '/commands/stream', { body: { cmd }, read: false });
  if (res.statusCode !== 200) throw new Error(`/commands/stream answered ${res.statusCode}`);
  let received = 0;
  let exit;
  await readSse(res, (event, data) => {
    if (event === 'stdout') received += JSON.parse(data).data.length;
    else if (event === 'exit') exit = JSON.parse(data);
  });
  const seconds = (performance.now() - start) / 1000;
  if (received !== bytes || exit?.exit_code !== 0) throw new Error(`stream gave ${received} of ${bytes} bytes, exit ${JSON.stringify(exit)}`);
  return bytes / MB / seconds;
}

async function streamDirect(cmd, bytes) {
  const start = performance.now();
  const { stdoutBytes, code } = await spawnLoginShell(cmd, { onStdout: () => {} });
  const seconds = (performance.now() - start) / 1000;
  if (stdoutBytes !== bytes || code !== 0) throw new Error(`direct pipe gave ${stdoutBytes} of ${bytes} bytes, exit ${code}`);
  return bytes / MB / seconds;
}

export async function run({ quick = false, envd } = {}) {
  const mib = quick ? 64 : 200;
  const bytes = mib * 1024 * 1024;
  const cmd = `yes | head -c ${mib}M`;
  const rounds = quick ? 3 : 5;
  const rows = await withEnvd(
    { envd },
    async (server) => {
      const samples = await interleave({ rounds, warmup: 1, minRounds: 2, budgetMs: quick ? 10_000 : 120_000, a: () => streamThroughEnvd(server, cmd, bytes), b: () => streamDirect(cmd, bytes) });
      const note = `\`${cmd}\`, ${samples.rounds} runs per side`;
      return [makeRow({ name: 'stream throughput', unit: 'MB/s', envd: median(samples.a), baseline: median(samples.b), goal: GOAL, note })];
    },
    (why) => [missingRow({ name: 'stream throughput', unit: 'MB/s', goal: GOAL, note: why })],
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
