import type { Limits } from '../cgroups/limits.js';
import { readFileSync, writeFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The version of what envd writes into a command's state directory. A newer
 * envd reads every older version (it adds fields with defaults); an older envd
 * leaves a newer record alone instead of guessing at it.
 */
export const META_VERSION = 1;

export interface PtySize {
  cols: number;
  rows: number;
}

/** What was asked for a command: written by envd before the holder starts, read back by a restarted envd. */
export interface CommandMeta {
  v: number;
  cmd: string;
  /** The arguments of a command run without a shell (absent for a command line). */
  args?: string[];
  cwd: string;
  user: string;
  background: boolean;
  stdin: boolean;
  pty: PtySize | null;
  started_at: string;
  /** CLOCK_MONOTONIC milliseconds (system-wide, so a restarted envd can compare) when the timeout fires; null: none. */
  deadline_ms: number | null;
  /** The command's slot in the usage table. */
  slot: number;
  /** Its cgroup limits (cgroup mode), as asked or from default_limits. */
  limits?: Limits;
}

/** What the holder wrote about the processes: the shell's and its own pid, each with its start time. */
export interface HolderPids {
  shellPid: number;
  shellStart: string;
  holderPid: number;
  holderStart: string;
}

/** How the holder recorded the end: written once the output was complete. */
export interface HolderStatus {
  exitCode: number;
  signal: number;
  truncated: { stdout: boolean; stderr: boolean };
  logEnd: number;
}

/**
 * The first record, in the command's fresh directory, before its holder
 * starts: written in place (no temp and rename), because a record torn by a
 * crash is one whose holder never started, and a restarted envd removes a
 * record it cannot read as a start that never finished.
 */
export async function createMeta(dir: string, meta: CommandMeta): Promise<void> {
  // At once: a few hundred bytes into the state dir (tmpfs), as every command starts (see readIfExists).
  writeFileSync(join(dir, 'meta.json'), JSON.stringify(meta), { mode: 0o600, flag: 'wx' });
}

/** A changed record of a running command (a resize): temp and rename, so a crash leaves the old one or the new. */
export async function writeMeta(dir: string, meta: CommandMeta): Promise<void> {
  const temp = join(dir, 'meta.json.tmp');
  await writeFile(temp, JSON.stringify(meta), { mode: 0o600 });
  await rename(temp, join(dir, 'meta.json'));
}

/*
 * The record and the pid file are read only when envd re-adopts, before it
 * listens: nothing else waits on the event loop then, and reading them
 * synchronously (small tmpfs files) is faster than four thread-pool round
 * trips each, which for 1,000 commands was a few hundred ms of the restart.
 */

/**
 * The record; 'newer' when a newer envd wrote it (this one leaves it alone);
 * undefined when it is missing or unreadable (a start that never finished).
 */
export function readMeta(dir: string): CommandMeta | 'newer' | undefined {
  const text = readIfExists(join(dir, 'meta.json'));
  if (text === undefined) return undefined;
  try {
    const meta = JSON.parse(text) as CommandMeta;
    if (meta.v > META_VERSION) return 'newer';
    if (typeof meta.v !== 'number') return undefined;
    return { ...meta, pty: meta.pty ?? null, deadline_ms: meta.deadline_ms ?? null };
  } catch {
    return undefined;
  }
}

/** The pid file; undefined while there is none (the holder writes it whole, by rename). */
export function readHolderPids(dir: string): HolderPids | undefined {
  const [shellPid, shellStart, holderPid, holderStart] = readIfExists(join(dir, 'pid'))?.trim().split(' ') ?? [];
  if (!shellPid || !shellStart || !holderPid || !holderStart) return undefined;
  return { shellPid: Number(shellPid), shellStart, holderPid: Number(holderPid), holderStart };
}

/**
 * A file's text, or undefined when it does not exist. Any other failure
 * (EMFILE, ENOMEM, EACCES) says nothing about the file and is thrown: a
 * record that cannot be read right now must never be taken for one that is not there.
 * Read synchronously: the files of a command's record are a few bytes in tmpfs,
 * read as commands start and end, and fs/promises' readFile took four trips
 * through the thread pool for each (bench/profile.mjs exec-throughput).
 */
export function readIfExists(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** The status file; undefined when there is none (the holder never finished its output). Throws on EMFILE and the like. */
export async function readHolderStatus(dir: string): Promise<HolderStatus | undefined> {
  // Read at once: a few bytes in tmpfs, read as every command ends (see readIfExists).
  const text = readIfExists(join(dir, 'status'));
  const fields = text?.trim().split(' ').map(Number) ?? [];
  if (fields.length < 5 || fields.some((n) => !Number.isFinite(n))) return undefined;
  const [exitCode, signal, out, err, logEnd] = fields as [number, number, number, number, number];
  return { exitCode, signal, truncated: { stdout: out === 1, stderr: err === 1 }, logEnd };
}

/**
 * Whether the process that had `pid` when it started at `start` is still
 * running ('same'), has exited but not been reaped ('zombie': its pid is not
 * reused yet, but it does nothing), is gone ('gone'), or cannot be told right
 * now ('unknown': /proc could not be read, e.g. out of descriptors). Callers
 * decide which way 'unknown' counts: a holder is not gone, a pid is not safe
 * to signal. A pid with another start time is another process: gone.
 */
export function processState(pid: number, start: string): 'same' | 'zombie' | 'gone' | 'unknown' {
  let stat: string | undefined;
  try {
    stat = readIfExists(`/proc/${pid}/stat`);
  } catch {
    return 'unknown';
  }
  if (stat === undefined) return 'gone';
  // The command name may hold ") ", so fields are counted after the last one: state is field 3, start time 22.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[19] !== start) return 'gone';
  return fields[0] === 'Z' || fields[0] === 'X' ? 'zombie' : 'same';
}

/** Milliseconds of CLOCK_MONOTONIC, the same clock for every process on this boot (a restarted envd included). */
export function monotonicMs(): number {
  return Number(process.hrtime.bigint() / 1_000_000n);
}
