// Starts the built envd (or any server script) as its own process on
// 127.0.0.1, waits for its first 200 from /health, and stops it.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { makeTempDir, removeTempDir } from './temp.mjs';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
// ENVD_BENCH_BUNDLE / ENVD_BENCH_EXECUTABLE point the bench at another build (a before/after comparison).
export const ENVD_JS = process.env.ENVD_BENCH_BUNDLE ?? `${ROOT}dist/envd.js`;
export const ENVD_SEA = process.env.ENVD_BENCH_EXECUTABLE ?? `${ROOT}dist/envd`;

/** The V8 flags envd is deployed with (package.json "envd.nodeFlags"; the single executable has them built in). */
export const ENVD_NODE_FLAGS = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')).envd?.nodeFlags ?? [];
/** The environment envd is deployed with (package.json "envd.env"; the guest unit sets the same). */
export const ENVD_ENV = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')).envd?.env ?? {};

/** ENVD_BENCH_ENV='{"K":"V"}' adds to envd's environment, for an A/B of an allocator setting. */
const BENCH_EXTRA_ENV = JSON.parse(process.env.ENVD_BENCH_ENV ?? '{}');

/** How long a server may take to answer /health before the bench gives up on it. */
const START_DEADLINE_MS = 15_000;

/** A port nobody listens on right now (the kernel's pick for port 0, released again). */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** VmRSS of a process in bytes. */
export function rssBytes(pid) {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(line?.split(/\s+/)[1]) * 1024;
}

/** RssAnon of a process in bytes: its resident memory that is no file's page-cache page. */
export function anonBytes(pid) {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('RssAnon:'));
  return Number(line?.split(/\s+/)[1]) * 1024;
}

/** Samples a process's RSS every `everyMs` until stopped; returns the peak seen. */
export function sampleRss(pid, everyMs = 20) {
  let peak = rssBytes(pid);
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, rssBytes(pid));
    } catch {
      // the process is gone; keep the peak we have
    }
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      try {
        peak = Math.max(peak, rssBytes(pid));
      } catch {}
      return peak;
    },
  };
}

// Servers still running when the bench exits (an error, Ctrl-C) get SIGTERM, so none outlives it.
const running = new Set();
process.once('exit', () => running.forEach((child) => child.kill('SIGTERM')));

/** One GET /health; resolves with the status code, rejects on a connection error. */
function getHealth(port) {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/health', agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Polls /health as fast as connections are refused until the first 200; resolves with the time it came, in ms since `since`. */
export async function waitForHealth(port, child, since = performance.now()) {
  const deadline = since + START_DEADLINE_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`server exited with ${child.exitCode ?? child.signalCode} before answering /health`);
    try {
      if ((await getHealth(port)) === 200) return performance.now() - since;
    } catch {
      // not listening yet
    }
    if (performance.now() > deadline) throw new Error(`no 200 from /health on port ${port} within ${START_DEADLINE_MS} ms`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/**
 * Runs a server process: `command` with `args`, `--port` chosen here when
 * `portFlag` is set (or PORT in its environment otherwise), waits for /health.
 * `stdout`: where its log goes (a file descriptor), nowhere by default.
 * Resolves with { pid, port, url, token, startMs, stop() }.
 */
export async function startServer({ command = process.execPath, args = [], env = {}, usePortFlag = true, stdout = 'ignore' } = {}) {
  const port = await freePort();
  const allArgs = usePortFlag ? [...args, '--host', '127.0.0.1', '--port', String(port)] : args;
  const started = performance.now();
  const child = spawn(command, allArgs, {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, USER: process.env.USER, PORT: String(port), ...env },
    stdio: ['ignore', stdout, 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr = (stderr + chunk).slice(-4000)));
  running.add(child);
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  void exited.then(() => running.delete(child));
  let startMs;
  try {
    startMs = await waitForHealth(port, child, started);
  } catch (error) {
    child.kill('SIGKILL');
    await exited;
    throw new Error(`${error.message}${stderr ? `\n${stderr}` : ''}`);
  }
  return {
    pid: child.pid,
    port,
    url: `http://127.0.0.1:${port}`,
    startMs,
    child,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 6_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * A fresh state directory and spool directory for an envd of the bench, laid
 * out as in a guest: the state in tmpfs (/run/envd is one there; this host's
 * /run is not), the spool in $TMPDIR. On this host's ext4 the inode
 * allocator's search past recently deleted inodes took the holders 38 % of the
 * machine's CPU under a stream of commands (perf), and exec throughput fell
 * from 0.57-0.71x to 0.33-0.39x of direct spawns, a cost no guest has.
 */
export function makeEnvdDirs() {
  const stateDir = makeTempDir('state', existsSync('/dev/shm') ? '/dev/shm' : undefined);
  const spoolDir = makeTempDir('spool');
  return { stateDir, spoolDir, remove: () => (removeTempDir(stateDir), removeTempDir(spoolDir)) };
}

/**
 * envd from dist/ (the bundle by default, or the single executable), with a
 * fresh token and reduced logging: the bench measures envd's work, not the
 * cost of one pino line per request on stdout (see README, Performance).
 */
export async function startEnvd({ executable = false, logLevel = 'warn', dirs, token = randomBytes(24).toString('hex'), args = [], extraEnv = {}, stdout } = {}) {
  const file = executable ? ENVD_SEA : ENVD_JS;
  if (!existsSync(file)) throw new Error(`${file} does not exist (npm run build)`);
  // Its own state and spool directories (never the real /run/envd of a root run), removed when it stops
  // unless the caller gave them (a restart: the next envd opens the same ones).
  const own = dirs ? undefined : makeEnvdDirs();
  const { stateDir, spoolDir } = dirs ?? own;
  const server = await startServer({
    command: executable ? file : process.execPath,
    args: [...(executable ? [] : [...ENVD_NODE_FLAGS, ...(process.env.BENCH_PRELOAD ? ['--expose-gc', '-r', process.env.BENCH_PRELOAD] : []), file]), '--log-level', logLevel, '--state-dir', stateDir, '--spool-dir', spoolDir, ...args],
    // Forwarding off unless a bench asks for it: on this shared host a bench's envd would
    // otherwise make every loopback listener (other runs' test servers) reachable on eth0.
    env: { ...ENVD_ENV, ENVD_FORWARD_LOOPBACK: 'off', ...BENCH_EXTRA_ENV, ENVD_ACCESS_TOKEN: token, ...extraEnv },
    stdout,
  });
  return {
    ...server,
    token,
    stateDir,
    spoolDir,
    async stop(signal) {
      await server.stop(signal);
      own?.remove();
    },
  };
}
