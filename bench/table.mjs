// `node bench/table.mjs`: the last run (bench/results/latest.json) as the Markdown table the README shows.
import { readFileSync } from 'node:fs';
import { ROOT } from './lib/envd-process.mjs';
import { formatTable } from './lib/table.mjs';

console.log(formatTable(JSON.parse(readFileSync(`${ROOT}bench/results/latest.json`, 'utf8'))));
