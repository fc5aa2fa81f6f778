// `npm run bench [-- --quick]`: every figure in turn against one envd started
// from dist/ (start-up and memory start their own), then a table, and
// bench/results/latest.json with one row per measured figure.
import { execSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { closeClient } from './lib/client.mjs';
import { ROOT, startEnvd } from './lib/envd-process.mjs';
import { formatTable } from './lib/table.mjs';
import { run as archive } from './archive.mjs';
import { run as batch } from './batch.mjs';
import { run as download } from './download.mjs';
import { run as execLatency } from './exec-latency.mjs';
import { run as execThroughput } from './exec-throughput.mjs';
import { run as httpFloor } from './http-floor.mjs';
import { run as keystroke } from './keystroke.mjs';
import { run as memory } from './memory.mjs';
import { run as outputStorm } from './output-storm.mjs';
import { run as ports } from './ports.mjs';
import { run as readopt } from './readopt.mjs';
import { run as recovery } from './recovery.mjs';
import { run as resume } from './resume.mjs';
import { run as search } from './search.mjs';
import { run as session } from './session.mjs';
import { run as startup } from './startup.mjs';
import { run as streamThroughput } from './stream-throughput.mjs';
import { run as upload } from './upload.mjs';
import { run as watchLatency } from './watch-latency.mjs';
import { run as watchTree } from './watch-tree.mjs';

const quick = process.argv.includes('--quick');

// Start-up first, while nothing else of ours runs; memory and the watched tree last, each on its own envd.
const ownEnvd = [['start-up', startup]];
const sharedEnvd = [
  ['HTTP floor', httpFloor],
  ['exec latency', execLatency],
  ['exec throughput', execThroughput],
  ['session commands', session],
  ['stream throughput', streamThroughput],
  ['resumed stream', resume],
  ['upload', upload],
  ['download', download],
  ['batch', batch],
  ['watch latency', watchLatency],
  ['keystroke echo', keystroke],
];
const last = [
  ['memory under use', memory],
  ['output storms', outputStorm],
  ['directories as tar', archive],
  ['recovery after load', recovery],
  ['re-adoption', readopt],
  ['recursive watch of 10,000 files', watchTree],
  ['search and find', search],
  ['ports and the loopback forward', ports],
];

function describeMachine() {
  const cpu = readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m)?.[1] ?? cpus()[0]?.model ?? 'unknown';
  const nproc = execSync('nproc').toString().trim();
  return `${nproc} CPUs (${cpu}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}, ${process.platform} ${execSync('uname -r').toString().trim()}`;
}

async function runFigure(label, run, ctx) {
  const started = performance.now();
  try {
    return await run(ctx);
  } catch (error) {
    console.log(`✗ ${label}: failed: ${error.stack ?? error}`);
    return [{ name: label, unit: '', envd: null, baseline: null, ratio: null, goal: '', met: false, note: `failed: ${error.message}` }];
  } finally {
    process.stderr.write(`  (${label}: ${((performance.now() - started) / 1000).toFixed(1)} s)\n`);
  }
}

const began = performance.now();
const machine = describeMachine();
console.log(`envd bench${quick ? ' (--quick)' : ''} on ${machine}\nratio = envd / baseline for every figure (≤ goals: lower is better; ≥ goals: higher is better)\n`);
const rows = [];
try {
  for (const [label, run] of ownEnvd) rows.push(...(await runFigure(label, run, { quick })));
  const envd = await startEnvd();
  try {
    for (const [label, run] of sharedEnvd) rows.push(...(await runFigure(label, run, { quick, envd })));
  } finally {
    await envd.stop();
  }
  for (const [label, run] of last) rows.push(...(await runFigure(label, run, { quick })));
} finally {
  closeClient();
}

writeFileSync(`${ROOT}bench/results/latest.json`, `${JSON.stringify(rows, null, 2)}\n`);
console.log(`\n${formatTable(rows)}\n`);
const judged = rows.filter((r) => r.met !== null);
console.log(`${judged.filter((r) => r.met).length} of ${judged.length} goals met; ${((performance.now() - began) / 1000).toFixed(0)} s; written to bench/results/latest.json`);
console.log(`machine: ${machine}`);
