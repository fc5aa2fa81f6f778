// stream throughput: MB/s of a command's stdout through POST /commands/stream,
// read and decoded event by event by a client, against the same command's
// stdout pipe read directly in Node. The judged row prints 80-byte text lines
// (`yes <79 characters>`), like a build log; a second, reported row prints
// `yes`'s "y\n", the worst case for envd's JSON (every other byte is a newline
// to escape). /dev/zero would measure only \u0000 escaping.
//
// Both sides are timed from the first output byte to the end, and count the
// bytes after the first read: the login shell's start-up is the same on both
// sides and is no part of streaming, yet it differs tenfold between machines
// (root's `pyenv init` here: 110 ms on one, 700 ms on another), which moved
// the ratio towards 1 by as much as the machine was slow to start a shell.
import { readSse, send } from './lib/client.mjs';
import { atLeast, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { COMMAND_USER, spawnLoginShell } from './lib/spawn-direct.mjs';
import { interleave, median } from './lib/stats.mjs';

const GOAL = atLeast(0.6);
const MB = 1e6;

/** Counts output from its first piece on: MB/s over the bytes after that piece, up to `end()`. */
function firstByteClock() {
  let start;
  let first = 0;
  let total = 0;
  return {
    add(n) {
      if (start === undefined) (start = performance.now()), (first = n);
      total += n;
    },
    get total() {
      return total;
    },
    mbPerSecond: () => (total - first) / MB / ((performance.now() - start) / 1000),
  };
}

async function streamThroughEnvd(server, cmd, bytes) {
  const res = await send(server, 'POST', '/commands/stream', { body: { cmd, user: COMMAND_USER.name }, read: false });
  if (res.statusCode !== 200) throw new Error(`/commands/stream answered ${res.statusCode}`);
  const clock = firstByteClock();
  let exit;
  await readSse(res, (event, data) => {
    if (event === 'stdout') clock.add(JSON.parse(data).data.length);
    else if (event === 'exit') exit = JSON.parse(data);
  });
  if (clock.total !== bytes || exit?.exit_code !== 0) throw new Error(`stream gave ${clock.total} of ${bytes} bytes, exit ${JSON.stringify(exit)}`);
  return clock.mbPerSecond();
}

async function streamDirect(cmd, bytes) {
  const clock = firstByteClock();
  const { stdoutBytes, code } = await spawnLoginShell(cmd, { onStdout: (chunk) => clock.add(chunk.length) });
  if (stdoutBytes !== bytes || code !== 0) throw new Error(`direct pipe gave ${stdoutBytes} of ${bytes} bytes, exit ${code}`);
  return clock.mbPerSecond();
}

const LINE = 'envd stream bench: a line of text as long as a typical log line, 80 bytes.'.padEnd(79, '.');

export async function run({ quick = false, envd } = {}) {
  const rounds = quick ? 3 : 5;
  const cases = [
    { name: 'stream throughput', mib: quick ? 64 : 200, cmd: (mib) => `yes '${LINE}' | head -c ${mib}M`, goal: GOAL },
    { name: 'stream throughput (y\\n, worst case)', mib: quick ? 32 : 200, cmd: (mib) => `yes | head -c ${mib}M`, goal: null },
  ];
  const rows = await withEnvd(
    { envd },
    async (server) => {
      const rows = [];
      for (const { name, mib, cmd: makeCmd, goal } of cases) {
        const bytes = mib * 1024 * 1024;
        const cmd = makeCmd(mib);
        const samples = await interleave({ rounds, warmup: 1, minRounds: 2, budgetMs: quick ? 8_000 : 120_000, a: () => streamThroughEnvd(server, cmd, bytes), b: () => streamDirect(cmd, bytes) });
        const shown = cmd.replace(LINE, '<79 chars>');
        rows.push(makeRow({ name, unit: 'MB/s', envd: median(samples.a), baseline: median(samples.b), goal, note: `\`${shown}\`, from the first byte, ${samples.rounds} runs per side` }));
      }
      return rows;
    },
    (why) => cases.map(({ name, goal }) => missingRow({ name, unit: 'MB/s', goal, note: why })),
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
