import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import { FrameDecoder, MessageDecoder, type HolderMessage, type StreamName } from '../../src/holder/protocol.js';

export const HOLDER_BINARY = join(process.cwd(), 'dist', 'envd-holder');
export const USAGE_BYTES = 4096 * 16;
const MiB = 1024 * 1024;

export interface HolderOptions {
  /** The command: file then arguments. */
  command: string[];
  stdin?: boolean;
  pty?: { cols: number; rows: number };
  cap?: number;
  memoryBudget?: number;
  spoolBudget?: number;
  slot?: number;
  /** A spool directory of the test's own (e.g. a small tmpfs); default: a fresh one in the temp dir. */
  spoolDir?: string;
  /** Where the state dir goes (e.g. a small tmpfs); default: a fresh one in the temp dir. */
  stateRoot?: string;
  /** Called with the usage file before the holder starts, to fill other commands' slots. */
  prepareUsage?: (usage: Buffer) => void;
  env?: Record<string, string>;
  cwd?: string;
  /** --hold-output: milliseconds the holder reads no output while waiting for a client's LIVE_ON. */
  holdOutputMs?: number;
  /** Runs the holder through this command prefix (which must exec "$0" "$@"), e.g. to set process state first. */
  launcher?: string[];
}

export interface RunningHolder {
  child: ChildProcess;
  holderPid: number;
  shellPid: number;
  /** The `ready` line as the holder printed it. */
  readyLine: string;
  /** Milliseconds from spawn to the `ready` line. */
  readyMs: number;
  root: string;
  dir: string;
  spoolDir: string;
  usageFile: string;
  slot: number;
  /** Resolves with the holder's exit code once it has exited. */
  exited: Promise<number | null>;
  connect(): Promise<HolderClient>;
}

export interface HolderClient {
  socket: Socket;
  /** The next message (waiting up to timeoutMs); throws if the connection closes first. */
  next(timeoutMs?: number): Promise<HolderMessage>;
  /** Messages until (and including) the first of the given type. */
  until(type: HolderMessage['type'], timeoutMs?: number): Promise<HolderMessage[]>;
  send(message: Buffer): void;
  /** Resolves when the holder closed the connection. */
  closed: Promise<void>;
  close(): void;
}

const cleanups: (() => Promise<void> | void)[] = [];

/** Registers the cleanup of every holder a test file starts: process groups killed, holders ended, temp dirs removed. */
export function useHolders(): void {
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
}

/** Runs something after the current test, in reverse order of registration (e.g. unmount before the temp dir goes). */
export function afterThisTest(cleanup: () => Promise<void> | void): void {
  cleanups.push(cleanup);
}

export function makeTempRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'envd-holder-'));
  cleanups.push(() => rmSync(root, { recursive: true, force: true }));
  return root;
}

export function holderArgs(options: HolderOptions, paths: { dir: string; usageFile: string; spoolDir: string; slot: number }): string[] {
  const args = [
    '--dir', paths.dir,
    '--usage', paths.usageFile,
    '--slot', String(paths.slot),
    '--memory-budget', String(options.memoryBudget ?? 64 * MiB),
    '--spool-dir', paths.spoolDir,
    '--spool-budget', String(options.spoolBudget ?? 64 * MiB),
    '--cap', String(options.cap ?? 16 * MiB),
  ];
  if (options.stdin) args.push('--stdin');
  if (options.pty) args.push('--pty', `${options.pty.cols}x${options.pty.rows}`);
  if (options.holdOutputMs !== undefined) args.push('--hold-output', String(options.holdOutputMs));
  return [...args, '--', ...options.command];
}

/** Starts a real envd-holder the way envd does (its own session, cwd and env those of the command) and waits for `ready`. */
export async function startHolder(options: HolderOptions): Promise<RunningHolder> {
  const root = makeTempRoot();
  const state = options.stateRoot ?? join(root, 'state');
  const dir = join(state, 'cmds', randomBytes(8).toString('hex'));
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const spoolDir = options.spoolDir ?? join(root, 'spool');
  mkdirSync(spoolDir, { recursive: true, mode: 0o700 });
  const usageFile = join(state, 'usage');
  const usage = Buffer.alloc(USAGE_BYTES);
  options.prepareUsage?.(usage);
  writeFileSync(usageFile, usage, { mode: 0o600 });
  const slot = options.slot ?? 7;

  const started = performance.now();
  const args = holderArgs(options, { dir, usageFile, spoolDir, slot });
  const [file, ...prefix] = options.launcher ? [...options.launcher, HOLDER_BINARY] : [HOLDER_BINARY];
  const child = spawn(file!, [...prefix, ...args], {
    detached: true,
    cwd: options.cwd ?? root,
    env: options.env ?? { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let shellPid = 0;
  cleanups.push(async () => {
    // Whatever a failed test left: the command's group, then the holder (it ends on its own once output closes).
    if (shellPid > 0) killQuietly(-shellPid);
    if (child.exitCode === null && child.signalCode === null) {
      const timer = setTimeout(() => killQuietly(child.pid!), 3_000);
      await exited;
      clearTimeout(timer);
    }
  });
  const line = await readFirstLine(child);
  const readyMs = performance.now() - started;
  const match = /^ready (\d+) \d+ \d+ \d+$/.exec(line);
  if (!match) throw new Error(`envd-holder did not start: ${line}`);
  shellPid = Number(match[1]);
  return {
    child,
    holderPid: child.pid!,
    shellPid,
    readyLine: line,
    readyMs,
    root,
    dir,
    spoolDir,
    usageFile,
    slot,
    exited,
    connect: () => connectHolder(join(dir, 'sock')),
  };
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function readFirstLine(child: ChildProcess): Promise<string> {
  let text = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no line from envd-holder within 5 s: ${JSON.stringify(text)}`)), 5_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      const end = text.indexOf('\n');
      if (end >= 0) {
        clearTimeout(timer);
        resolve(text.slice(0, end));
      }
    });
    child.stdout!.once('end', () => {
      clearTimeout(timer);
      if (!text.includes('\n')) reject(new Error(`envd-holder closed stdout without a line: ${JSON.stringify(text)}`));
    });
  });
}

export async function connectHolder(path: string): Promise<HolderClient> {
  const socket = createConnection(path);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const decoder = new MessageDecoder();
  const ready: HolderMessage[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const closed = new Promise<void>((resolve) =>
    socket.once('close', () => {
      ended = true;
      wake?.();
      resolve();
    }),
  );
  socket.on('error', () => {}); // a reset shows as 'close'
  socket.on('data', (chunk: Buffer) => {
    decoder.push(chunk);
    for (let message = decoder.next(); message; message = decoder.next()) {
      // What follows HELLO is in the holder's protocol version.
      if (message.type === 'hello') decoder.version = message.version;
      ready.push(message);
    }
    wake?.();
  });
  cleanups.push(() => {
    socket.destroy();
  });
  const next = async (timeoutMs = 5_000): Promise<HolderMessage> => {
    const deadline = Date.now() + timeoutMs;
    while (ready.length === 0) {
      if (ended) throw new Error('the holder closed the connection');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no message from the holder within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
    return ready.shift()!;
  };
  return {
    socket,
    next,
    async until(type, timeoutMs = 5_000) {
      const seen: HolderMessage[] = [];
      for (;;) {
        const message = await next(timeoutMs);
        seen.push(message);
        if (message.type === type) return seen;
      }
    },
    send: (message) => void socket.write(message),
    closed,
    close: () => socket.destroy(),
  };
}

/** The segment paths, in order, from the `segments` file. */
export function segmentPaths(dir: string): string[] {
  const path = join(dir, 'segments');
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8').split('\n').filter((line) => line !== '');
}

/** The kept log: the concatenation of the segments. */
export function readLog(dir: string): Buffer {
  return Buffer.concat(segmentPaths(dir).map((path) => (existsSync(path) ? readFileSync(path) : Buffer.alloc(0))));
}

export interface ParsedLog {
  frames: { stream: StreamName; bytes: Buffer }[];
  stdout: Buffer;
  stderr: Buffer;
  /** Bytes after the last whole frame: always 0 for a log the holder wrote. */
  leftover: number;
}

export function parseLog(log: Buffer): ParsedLog {
  const decoder = new FrameDecoder();
  decoder.push(log);
  const frames: ParsedLog['frames'] = [];
  for (let frame = decoder.next(); frame; frame = decoder.next()) frames.push(frame);
  const of = (stream: StreamName) => Buffer.concat(frames.filter((f) => f.stream === stream).map((f) => f.bytes));
  return { frames, stdout: of('stdout'), stderr: of('stderr'), leftover: decoder.buffered };
}

export interface HolderStatus {
  exitCode: number;
  signal: number;
  truncated: { stdout: boolean; stderr: boolean };
  logEnd: number;
}

/** The `status` file, or undefined before the holder wrote it. */
export function readStatus(dir: string): HolderStatus | undefined {
  const path = join(dir, 'status');
  if (!existsSync(path)) return undefined;
  const text = readFileSync(path, 'utf8');
  const match = /^(-?\d+) (\d+) ([01]) ([01]) (\d+)\n$/.exec(text);
  if (!match) throw new Error(`malformed status file: ${JSON.stringify(text)}`);
  return { exitCode: Number(match[1]), signal: Number(match[2]), truncated: { stdout: match[3] === '1', stderr: match[4] === '1' }, logEnd: Number(match[5]) };
}

/** Field 22 of /proc/<pid>/stat. */
export function startTime(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
}

/** A process's state letter (R, S, Z, ...), or undefined once it is gone. */
export function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0];
  } catch {
    return undefined;
  }
}

export function isAlive(pid: number): boolean {
  const state = processState(pid);
  return state !== undefined && state !== 'Z';
}

export function usageSlot(usageFile: string, slot: number): { memory: number; spool: number } {
  const usage = readFileSync(usageFile);
  return { memory: Number(usage.readBigUInt64LE(slot * 16)), spool: Number(usage.readBigUInt64LE(slot * 16 + 8)) };
}

/** VmRSS and RssAnon of a process in KiB: the file-backed rest of a static holder is page cache shared by all holders. */
export function holderMemory(pid: number): { rssKiB: number; anonKiB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]);
  return { rssKiB: field('VmRSS'), anonKiB: field('RssAnon') };
}
