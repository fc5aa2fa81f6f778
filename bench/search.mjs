// search and find over a real tree (issue 42): POST /files/search and GET
// /files/find against ripgrep and GNU grep on the same tree, in the same run,
// warm cache, interleaved rounds, medians. The tree is the project's own
// node_modules copied until it has >= 30,000 files, with .gitignore files,
// under a git repository, plus a checkout of the project's source. Also: time
// to the first match, envd's RSS during a search over idle, and /health's p99
// while `(a+)+$` runs over megabytes.
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { atMost, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { send } from './lib/client.mjs';
import { ROOT, rssBytes, sampleRss } from './lib/envd-process.mjs';
import { median, percentile } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';

const MIB = 1024 * 1024;
const MIN_FILES = 30_000;
const LITERAL = 'createServer';
const REGEX = 'function\\s+\\w+Sync\\(';
const GLOB = '**/*.json';

/** Runs a program, discards its output (read through a pipe, as envd's is), resolves with the elapsed ms. */
function timeProgram(command, args, cwd) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'ignore'], env: { PATH: process.env.PATH, HOME: cwd } });
    child.stdout.resume();
    child.once('error', reject);
    child.once('close', (code) => (code === 0 || code === 1 ? resolve(performance.now() - started) : reject(new Error(`${command} exited with ${code}`))));
  });
}

/** One envd request whose streamed answer is read to its end; resolves with the elapsed ms and the time of the first match. */
async function timeEnvd(envd, method, path, body) {
  const started = performance.now();
  const res = await send(envd, method, path, { body, read: false });
  let first;
  let text = '';
  for await (const chunk of res) {
    if (first === undefined && chunk.includes('"type":"match"')) first = performance.now() - started;
    if (text.length < 4096) text += chunk;
  }
  if (res.statusCode !== 200) throw new Error(`${method} ${path}: ${res.statusCode} ${text}`);
  return { ms: performance.now() - started, firstMs: first };
}

function countFiles(dir) {
  let count = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) if (entry.isFile()) count++;
  return count;
}

/** The tree: copies of node_modules with .gitignore files until MIN_FILES, and the project's source, in one git repository. */
function makeTree(root) {
  execFileSync('git', ['init', '-q', root]);
  writeFileSync(join(root, '.gitignore'), '*.map\ncoverage/\n');
  const checkout = join(root, 'checkout');
  mkdirSync(checkout);
  execFileSync('sh', ['-c', `git -C "${ROOT}" archive HEAD | tar -x -C "${checkout}"`]);
  let files = countFiles(root);
  for (let copy = 0; files < MIN_FILES; copy++) {
    const target = join(root, `project-${copy}`, 'node_modules');
    cpSync(join(ROOT, 'node_modules'), target, { recursive: true, verbatimSymlinks: true });
    writeFileSync(join(target, '.gitignore'), '*.d.ts.map\n.cache/\n');
    files = countFiles(root);
  }
  return files;
}

export async function run(ctx) {
  const rounds = ctx.quick ? 3 : 7;
  const names = ['search: literal vs rg', 'search: literal vs grep -rn', 'search: regex vs rg', 'find vs rg --files', 'search: first match', 'search: RSS over idle', 'search: /health p99 during (a+)+$'];
  let rg = true;
  try {
    execFileSync('rg', ['--version']);
  } catch {
    rg = false;
  }
  if (!rg) return names.map((name) => missingRow({ name, unit: 'ms', note: 'ripgrep (rg) is not installed' }));
  const tree = makeTempDir('search');
  try {
    const files = makeTree(tree);
    return await withEnvd(ctx, async (envd) => {
      const search = (body) => timeEnvd(envd, 'POST', '/files/search', { path: tree, ...body });
      const find = () => timeEnvd(envd, 'GET', `/files/find?path=${encodeURIComponent(tree)}&glob=${encodeURIComponent(GLOB)}&max_results=1000000`);
      const pairs = {
        literalRg: [() => search({ pattern: LITERAL, literal: true }), () => timeProgram('rg', ['-n', '-S', '-F', LITERAL, tree], tree)],
        literalGrep: [() => search({ pattern: LITERAL, literal: true }), () => timeProgram('grep', ['-rn', '-F', LITERAL, tree], tree)],
        regexRg: [() => search({ pattern: REGEX }), () => timeProgram('rg', ['-n', '-S', REGEX, tree], tree)],
        find: [find, () => timeProgram('rg', ['--files', '-g', GLOB, tree], tree)],
      };
      const times = Object.fromEntries(Object.keys(pairs).map((key) => [key, { envd: [], tool: [] }]));
      // Warm the page cache and both sides once.
      for (const [a, b] of Object.values(pairs)) await Promise.all([a(), b()].map((p) => p.catch(() => undefined)));
      const firsts = [];
      for (let round = 0; round < rounds; round++) {
        for (const [key, [envdSide, toolSide]] of Object.entries(pairs)) {
          const e = await envdSide();
          times[key].envd.push(e.ms);
          if (key === 'literalRg') firsts.push(e.firstMs);
          times[key].tool.push(await toolSide());
        }
      }
      const row = (name, key, limit) => makeRow({ name, unit: 'ms', envd: median(times[key].envd), baseline: median(times[key].tool), goal: atMost(limit), note: `${files} files` });
      const rows = [row(names[0], 'literalRg', 1.5), row(names[1], 'literalGrep', 0.8), row(names[2], 'regexRg', 1.5), row(names[3], 'find', 1.5)];
      rows.push(makeRow({ name: names[4], unit: 'ms', envd: median(firsts), goal: atMost(50, 'ms') }));

      // RSS during a regex search (the one that decodes every file) over idle.
      const idle = rssBytes(envd.pid);
      const sampler = sampleRss(envd.pid, 5);
      await search({ pattern: REGEX });
      rows.push(makeRow({ name: names[5], unit: 'MiB', envd: (sampler.stop() - idle) / MIB, goal: atMost(16, 'MiB') }));

      // /health alone, then while a catastrophic pattern runs over 16 MiB: the baseline is this machine's own p99.
      const healthFor = async (ms) => {
        const samples = [];
        const until = performance.now() + ms;
        while (performance.now() < until) {
          const started = performance.now();
          await send(envd, 'GET', '/health');
          samples.push(performance.now() - started);
          await new Promise((r) => setTimeout(r, 10));
        }
        return samples;
      };
      const idleHealth = await healthFor(ctx.quick ? 2_000 : 5_000);
      const big = join(tree, 'catastrophic');
      mkdirSync(big);
      const line = `${'a'.repeat(40)}!\n`;
      writeFileSync(join(big, 'a.txt'), line.repeat(Math.ceil((16 * MIB) / line.length)));
      const running = search({ pattern: '(a+)+$', path: big, timeout_ms: 20_000 });
      const health = await healthFor(ctx.quick ? 2_000 : 5_000);
      await running;
      rows.push(makeRow({ name: names[6], unit: 'ms', envd: percentile(health, 0.99), baseline: percentile(idleHealth, 0.99), goal: atMost(50, 'ms'), note: `${health.length} requests; baseline: /health p99 with no search` }));
      return rows;
    }, (note) => names.map((name) => missingRow({ name, unit: 'ms', note })));
  } finally {
    removeTempDir(tree);
  }
}

runIfMain(import.meta.url, async (opts) => {
  for (const row of await run(opts)) printRow(row);
});
