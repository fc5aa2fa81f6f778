// Where a search's CPU time goes, by thread (issue 42): envd's event loop
// (the walk, the ignore rules, the scans of candidate files) against libuv's
// pool threads (search-batch.c's per-file work), from /proc/PID/task/*/stat
// before and after a few searches of the bench's tree. Usage:
//   node bench/search-threads.mjs TREE [rounds]
import { readdirSync, readFileSync } from 'node:fs';
import { send } from './lib/client.mjs';
import { startEnvd } from './lib/envd-process.mjs';
import { closeClient } from './lib/client.mjs';

const TICK_MS = 10; // USER_HZ 100
const tree = process.argv[2];
const rounds = Number(process.argv[3] ?? 5);

function threadTimes(pid) {
  const times = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    times.set(tid, { name, ms: (Number(fields[11]) + Number(fields[12])) * TICK_MS });
  }
  return times;
}

const envd = await startEnvd();
try {
  for (const [label, body] of [['literal', { pattern: 'createServer', literal: true }], ['regex', { pattern: 'function\\s+\\w+Sync\\(' }]]) {
    const run = async () => {
      const res = await send(envd, 'POST', '/files/search', { body: { path: tree, ...body }, read: false });
      for await (const _ of res);
    };
    await run();
    const before = threadTimes(envd.pid);
    const started = performance.now();
    for (let i = 0; i < rounds; i++) await run();
    const wall = (performance.now() - started) / rounds;
    const after = threadTimes(envd.pid);
    let main = 0;
    let pool = 0;
    let other = 0;
    for (const [tid, { name, ms }] of after) {
      const spent = (ms - (before.get(tid)?.ms ?? 0)) / rounds;
      if (String(envd.pid) === tid) main += spent;
      else if (name.startsWith('libuv-worker')) pool += spent;
      else other += spent;
    }
    console.log(`${label}: ${wall.toFixed(0)} ms a search; CPU a search: event loop ${main.toFixed(0)} ms, pool threads ${pool.toFixed(0)} ms, other threads ${other.toFixed(0)} ms`);
  }
} finally {
  await envd.stop();
  closeClient();
}
