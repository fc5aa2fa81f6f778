// The few checks that prove a fresh install built a working envd: the single
// executable answers --version, and the bundle, started as a newcomer would,
// runs one command over HTTP. Run from the root of the built tree:
//   node .ci/smoke.mjs <report.json>
// Prints one line per check and writes a vitest-shaped report that
// .ci/count.mjs adds to the "N passed, M failed" line.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';

const [report] = process.argv.slice(2);
if (!report) throw new Error('usage: node .ci/smoke.mjs <report.json>');
const label = process.env.SMOKE_LABEL ?? 'smoke';

const checks = [
  ['dist/envd --version prints the package version', checkVersion],
  ['node dist/envd.js runs `echo ok` through POST /commands', checkCommand],
];

let passed = 0;
let failed = 0;
for (const [name, check] of checks) {
  try {
    await check();
    passed++;
    console.log(`${label}: ok   ${name}`);
  } catch (error) {
    failed++;
    console.log(`${label}: FAIL ${name}: ${error.message}`);
  }
}
writeFileSync(report, JSON.stringify({ numPassedTests: passed, numFailedTests: failed, numFailedTestSuites: failed ? 1 : 0, numPendingTests: 0, numTodoTests: 0 }));
process.exit(failed ? 1 : 0);

async function checkVersion() {
  const { version } = JSON.parse(readFileSync('package.json', 'utf8'));
  const printed = execFileSync('dist/envd', ['--version'], { encoding: 'utf8', timeout: 10_000 }).trim();
  if (printed !== version) throw new Error(`printed ${JSON.stringify(printed)}, package.json says ${version}`);
}

async function checkCommand() {
  const token = randomBytes(16).toString('hex');
  const port = await freeLoopbackPort();
  const url = `http://127.0.0.1:${port}`;
  const envd = spawn(process.execPath, ['dist/envd.js', '--host', '127.0.0.1', '--port', String(port), '--log-level', 'warn'], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ENVD_ACCESS_TOKEN: token },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const exited = new Promise((resolve) => envd.once('exit', (code, signal) => resolve(signal ?? code)));
  try {
    await waitForHealth(url, exited);
    const response = await fetch(`${url}/commands`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ cmd: 'echo ok' }),
      signal: AbortSignal.timeout(15_000),
    });
    const body = await response.text();
    if (response.status !== 200) throw new Error(`POST /commands answered ${response.status}: ${body}`);
    const result = JSON.parse(body);
    if (result.stdout !== 'ok\n' || result.exit_code !== 0) throw new Error(`unexpected result ${body}`);
  } finally {
    envd.kill('SIGTERM');
    const code = await exited;
    if (code !== 0 && code !== 'SIGTERM') console.log(`${label}: envd exited with ${code} on SIGTERM`);
  }
}

/** Polls /health until envd answers; fails at once if it exits, or after 10 s. */
async function waitForHealth(url, exited) {
  let gone;
  exited.then((code) => (gone = code));
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (gone !== undefined) throw new Error(`envd exited (${gone}) before answering /health`);
    try {
      if ((await fetch(`${url}/health`)).status === 200) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error('no 200 from /health within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
}

function freeLoopbackPort() {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}
