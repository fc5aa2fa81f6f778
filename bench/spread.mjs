// `node bench/spread.mjs <figure> [--runs N] [--quick]`: runs one figure (a
// bench/<figure>.mjs name) N times in a row (5 by default), each run as it
// would run alone, then prints every row's value per run with its lowest,
// median and highest: whether one run of that figure can be trusted. The
// value is the ratio where the row has one (envd / baseline), else envd's own.
import { closeClient } from './lib/client.mjs';
import { round, spread } from './lib/stats.mjs';

const [figure] = process.argv.slice(2);
if (!figure || figure.startsWith('-')) {
  console.error('usage: node bench/spread.mjs <figure> [--runs N] [--quick]   (figure: a bench/<figure>.mjs name)');
  process.exit(2);
}
const runsAt = process.argv.indexOf('--runs');
const runs = runsAt === -1 ? 5 : Number(process.argv[runsAt + 1]);
if (!Number.isInteger(runs) || runs < 2) {
  console.error('--runs must be an integer of at least 2');
  process.exit(2);
}
const { run } = await import(`./${figure}.mjs`);
const values = new Map();
try {
  for (let i = 0; i < runs; i++) {
    for (const row of await run({ quick: process.argv.includes('--quick') })) {
      const value = row.ratio ?? row.envd;
      if (value == null) continue;
      const unit = row.ratio != null ? '×' : ` ${row.unit}`;
      if (!values.has(row.name)) values.set(row.name, { unit, list: [] });
      values.get(row.name).list.push(value);
    }
  }
} finally {
  closeClient();
}
console.log(`\n${figure}, ${runs} runs:`);
for (const [name, { unit, list }] of values) {
  const { min, median, max, range } = spread(list);
  console.log(`${name}: ${list.map((v) => round(v)).join(', ')}${unit}  (lowest ${round(min)}, median ${round(median)}, highest ${round(max)}, range ${round(range)})`);
}
