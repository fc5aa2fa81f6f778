import { errnoToHttpError, HttpError } from '../errors.js';
import type { HolderSpawner } from './holder-spawner.js';
import { signalProcess } from './kill-tree.js';
import { markStart } from './start-trace.js';
import type { HolderPids } from './meta.js';
import type { PreparedCommand } from './spawn.js';

/**
 * How long the holder of a streamed command reads none of its output while
 * waiting for the stream's LIVE_ON (--hold-output): envd says it within
 * milliseconds; this only bounds how long a command waits for an envd that died.
 */
export const HOLD_OUTPUT_MS = 10_000;

/** How long a holder may take to say `ready`: it only makes a socket and pipes and forks. */
export const READY_TIMEOUT_MS = 10_000;

export interface HolderOptions {
  holderPath: string;
  dir: string;
  usagePath: string;
  slot: number;
  memoryBudget: number;
  spoolDir: string;
  spoolBudget: number;
  capBytes: number;
  /** Read no output until envd says LIVE_ON (a streamed command: its client gets every byte, past the cap too). */
  holdOutput: boolean;
  /** The command's cgroup directory (cgroup mode): the holder's child joins it before exec. */
  cgroup?: string | undefined;
}

/**
 * Starts the holder of one command, which starts the command itself (see
 * src/holder/holder.c), and resolves with both processes' pid records
 * once the holder listens on its socket. EMFILE/ENFILE/EAGAIN become 503:
 * the sandbox is out of descriptors or processes for the moment, and the
 * caller may retry.
 *
 * The holder is forked by the spawner (holder-spawner.ts), runs in its own
 * session and keeps no descriptor of envd's, so a restart of envd leaves it,
 * and the command, running.
 */
export async function startHolder(prepared: PreparedCommand, options: HolderOptions, spawner: HolderSpawner): Promise<HolderPids> {
  const argv = [
    options.holderPath,
    '--dir', options.dir,
    '--usage', options.usagePath,
    '--slot', String(options.slot),
    '--memory-budget', String(options.memoryBudget),
    '--spool-dir', options.spoolDir,
    '--spool-budget', String(options.spoolBudget),
    '--cap', String(options.capBytes),
    ...(prepared.stdin ? ['--stdin'] : []),
    ...(options.holdOutput ? ['--hold-output', String(HOLD_OUTPUT_MS)] : []),
    ...(prepared.switchTo ? ['--user', `${prepared.switchTo.uid}:${prepared.switchTo.gid}:${prepared.switchTo.groups.join(',')}`] : []),
    ...(options.cgroup ? ['--cgroup', options.cgroup] : []),
    ...(prepared.pty ? ['--pty', `${prepared.pty.cols}x${prepared.pty.rows}`] : []),
    '--', prepared.file, ...prepared.args,
  ];
  let holder;
  try {
    markStart('spawner-asked');
    holder = await spawner.spawn(argv, prepared.cwd, prepared.env, READY_TIMEOUT_MS);
    markStart('ready-read');
  } catch (cause) {
    if (cause instanceof HttpError) throw cause;
    const mapped = errnoToHttpError(cause, 'starting the command');
    throw mapped instanceof HttpError ? mapped : new HttpError(500, 'the command could not be started', { cause });
  }
  // "ready <shellPid> <shellStart> <holderPid> <holderStart>": the pid file's record (docs/holder-protocol.md).
  const ready = /^ready (\d+) (\d+) (\d+) (\d+)$/.exec(holder.line);
  if (ready) return { shellPid: Number(ready[1]), shellStart: ready[2]!, holderPid: Number(ready[3]), holderStart: ready[4]! };
  signalProcess(holder.holderPid, 'SIGKILL'); // usually gone already: it said why and ended
  throw holderFailure(holder.line, prepared);
}

/**
 * What a holder's `error` line means for the request: what the sandbox lacks
 * (no terminal, a cwd gone since it was checked) is the caller's to know, as a
 * 4xx that says it; anything else is envd's fault, a 500.
 */
function holderFailure(line: string, prepared: PreparedCommand): HttpError {
  const said = line.replace(/^error /, '');
  if (said.startsWith('terminal unavailable')) return new HttpError(409, `no terminal can be opened in this sandbox: ${said.slice('terminal unavailable: '.length)}`);
  if (said.startsWith('cannot enter ')) return new HttpError(400, `body/cwd: ${prepared.cwd} cannot be entered: ${said.slice(said.lastIndexOf(': ') + 2)}`);
  return new HttpError(500, 'the command could not be started', { cause: new Error(`envd-holder said: ${line || '(nothing)'}`) });
}
