import { createServer } from 'node:net';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import pkg from '../../package.json' with { type: 'json' };

/** The V8 flags envd is deployed with (package.json "envd.nodeFlags"), so measurements match production. */
export const ENVD_NODE_FLAGS: string[] = pkg.envd.nodeFlags;
/** The environment envd is deployed with (package.json "envd.env": the guest unit sets the same). */
export const ENVD_ENV: Record<string, string> = pkg.envd.env;

/** Open file descriptors of a process (this one by default). */
export function countFds(pid: number | 'self' = 'self'): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** inotify instances a process holds open. */
export function countInotify(pid: number | 'self' = 'self'): number {
  let count = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:inotify') count++;
    } catch {
      // closed while we looked
    }
  }
  return count;
}

/**
 * Live (not zombie) processes whose command line contains the marker. Command
 * holders are left out: their command line repeats the command they hold.
 */
export function findProcesses(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (!cmdline.includes(marker) || cmdline.split(' ')[0]!.includes('envd-holder')) continue;
      const state = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]?.[0];
      if (state !== 'Z') found.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return found;
}

/** Zombie children of a process. */
export function countZombieChildren(parent: number = process.pid): number {
  let zombies = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const rest = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]!.split(' ');
      if (rest[0] === 'Z' && Number(rest[1]) === parent) zombies++;
    } catch {
      // exited while we looked
    }
  }
  return zombies;
}

export function rssBytes(pid: number | 'self' = 'self'): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(line?.split(/\s+/)[1]) * 1024;
}

export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export interface EnvdProcess {
  child: ChildProcess;
  url: string;
  /** The state and spool directories it was given (temporary ones unless the caller passed its own). */
  stateDir: string;
  spoolDir: string;
  /** Every stdout line so far. */
  lines: string[];
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const ON_ANY_LOOPBACK_PORT = ['--host', '127.0.0.1', '--port', '0'];

/** Runs the built bundle as its own process and waits until it listens. */
export async function startEnvdProcess(args: string[] = [], env: NodeJS.ProcessEnv = {}, cwd?: string, script = `${process.cwd()}/dist/envd.js`): Promise<EnvdProcess> {
  return startListening(process.execPath, [...ENVD_NODE_FLAGS, script, ...ON_ANY_LOOPBACK_PORT], args, env, cwd);
}

/** Runs the single executable dist/envd (it applies the node flags itself) and waits until it listens. */
export async function startEnvdExecutable(args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<EnvdProcess> {
  return startListening(`${process.cwd()}/dist/envd`, ON_ANY_LOOPBACK_PORT, args, env);
}

async function startListening(file: string, fixedArgs: string[], args: string[], env: NodeJS.ProcessEnv, cwd?: string): Promise<EnvdProcess> {
  // Never the real /run/envd and /var/lib/envd of a root test run: a temporary pair, removed when envd stops.
  const given = args.includes('--state-dir');
  const dirs = given ? undefined : mkdtempSync(join(tmpdir(), 'envd-proc-'));
  const dirArgs = dirs ? ['--state-dir', join(dirs, 'state'), '--spool-dir', join(dirs, 'spool')] : [];
  const allArgs = [...dirArgs, ...args];
  const child = spawn(file, [...fixedArgs, ...allArgs], {
    cwd,
    // Forwarding off unless the test asks: a test envd must not make the runner's loopback listeners reachable elsewhere.
    env: { PATH: process.env.PATH, ...ENVD_ENV, ENVD_FORWARD_LOOPBACK: 'off', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    // A child that never says it listens (a --log-level above info hides that
    // line) is killed, not left behind.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`envd did not start (no "listening at" line within 10 s): ${lines.join('\n')}`));
    }, 10_000);
    child.once('exit', (code) => reject(new Error(`envd exited with ${code}: ${lines.join('\n')}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      const match = /listening at (http:\/\/[\d.]+:\d+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]!);
      }
    });
  });
  const option = (name: string) => allArgs[allArgs.lastIndexOf(name) + 1]!;
  return {
    child,
    url,
    stateDir: option('--state-dir'),
    spoolDir: option('--spool-dir'),
    lines,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const code = await exited;
      if (dirs) rmSync(dirs, { recursive: true, force: true });
      return code;
    },
  };
}

/** Pids of envd-holder --receive processes (the upload receiver, src/holder/receive.c) alive now. */
export function findReceivers(): string[] {
  return findHolderJobs('--receive');
}

/** Processes running a job of the holder binary (`--receive`, `--relay`): their pids. */
export function findHolderJobs(mode: '--receive' | '--relay'): string[] {
  return readdirSync('/proc').filter((entry) => {
    try {
      return /^\d+$/.test(entry) && readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').includes(mode);
    } catch {
      return false;
    }
  });
}

/** A port nobody listens on right now (the kernel's pick for port 0, released again), for a process that takes --port. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
