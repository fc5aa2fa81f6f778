// `envd exec -- true` (dist/envd started fresh each time, the whole round trip) against curl doing
// the same POST /commands, each run N times interleaved against one envd; prints medians and the ratio.
// Usage: node bench/cli-exec.mjs [N]   (after node build.mjs)
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const N = Number(process.argv[2] ?? 20);
const dir = mkdtempSync(join(tmpdir(), 'envd-bench-cli-'));
const port = 40000 + Math.floor(Math.random() * 20000);
const token = 'benchtoken';
const server = spawn('dist/envd', ['--host', '127.0.0.1', '--port', String(port), '--state-dir', join(dir, 'state'), '--spool-dir', join(dir, 'spool'), '--log-level', 'error'], {
  env: { ...process.env, ENVD_ACCESS_TOKEN: token },
  stdio: 'ignore',
});
const url = `http://127.0.0.1:${port}`;
for (let i = 0; i < 100; i++) {
  try {
    execFileSync('curl', ['-sf', `${url}/health`]);
    break;
  } catch {
    await new Promise((r) => setTimeout(r, 100));
  }
}
const time = (file, args, env = process.env) => {
  const start = process.hrtime.bigint();
  execFileSync(file, args, { env, stdio: 'ignore' });
  return Number(process.hrtime.bigint() - start) / 1e6;
};
const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const curl = [];
const curlStream = [];
const cli = [];
const env = { ...process.env, ENVD_URL: url, ENVD_TOKEN: token };
try {
  for (let i = 0; i < N; i++) {
    curl.push(time('curl', ['-sf', '-H', `authorization: Bearer ${token}`, '-H', 'content-type: application/json', '-d', '{"cmd":"true"}', `${url}/commands`]));
    // exec follows the output live, so it uses the stream route: curl on that route too, for the share that is the route's.
    curlStream.push(time('curl', ['-sfN', '-H', `authorization: Bearer ${token}`, '-H', 'content-type: application/json', '-d', '{"cmd":"true"}', `${url}/commands/stream`]));
    cli.push(time('dist/envd', ['exec', '--', 'true'], env));
  }
  const c = median(curl);
  const e = median(cli);
  const s = median(curlStream);
  console.log(`curl POST /commands: ${c.toFixed(1)} ms   curl POST /commands/stream: ${s.toFixed(1)} ms   envd exec -- true: ${e.toFixed(1)} ms`);
  console.log(`ratio exec/curl(/commands) ${(e / c).toFixed(2)}x (goal <= 1.5x)   exec/curl(/commands/stream) ${(e / s).toFixed(2)}x   n=${N}`);
} finally {
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  rmSync(dir, { recursive: true, force: true });
}
