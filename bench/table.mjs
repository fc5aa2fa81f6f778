// `node bench/table.mjs [results.json]`: a run's results (bench/results/latest.json
// by default) as the Markdown table the README shows.
import { readFileSync } from 'node:fs';
import { ROOT } from './lib/envd-process.mjs';
import { formatTable } from './lib/table.mjs';

const file = process.argv[2] ?? `${ROOT}bench/results/latest.json`;
console.log(formatTable(JSON.parse(readFileSync(file, 'utf8'))));
