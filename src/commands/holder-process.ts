import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { errnoToHttpError, HttpError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { PreparedCommand } from './spawn.js';

/** How long a holder may take to say `ready`: it only makes a socket and pipes and forks. */
const READY_TIMEOUT_MS = 10_000;

export interface HolderOptions {
  holderPath: string;
  dir: string;
  usagePath: string;
  slot: number;
  memoryBudget: number;
  spoolDir: string;
  spoolBudget: number;
  capBytes: number;
}

/**
 * Starts the holder of one command, which starts the command itself (see
 * src/holder/envd-holder.c), and resolves with the command's pid once the
 * holder listens on its socket. EMFILE/ENFILE/EAGAIN become 503: envd is out
 * of descriptors or processes for the moment, and the caller may retry.
 *
 * The holder runs in its own session and keeps no descriptor of envd's, so
 * a restart of envd leaves it, and the command, running.
 */
export async function startHolder(prepared: PreparedCommand, options: HolderOptions, log: Logger): Promise<number> {
  const args = [
    '--dir', options.dir,
    '--usage', options.usagePath,
    '--slot', String(options.slot),
    '--memory-budget', String(options.memoryBudget),
    '--spool-dir', options.spoolDir,
    '--spool-budget', String(options.spoolBudget),
    '--cap', String(options.capBytes),
    ...(prepared.stdin ? ['--stdin'] : []),
    ...(prepared.pty ? ['--pty', `${prepared.pty.cols}x${prepared.pty.rows}`] : []),
    '--', prepared.file, ...prepared.args,
  ];
  const holder = spawn(options.holderPath, args, { cwd: prepared.cwd, env: prepared.env, detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
  // Attached before anything can throw: an unhandled 'error' would end envd.
  holder.on('error', (error) => log.warn({ err: error }, 'holder process error'));
  if (holder.pid === undefined) {
    const [cause] = (await once(holder, 'error')) as [NodeJS.ErrnoException];
    const mapped = errnoToHttpError(cause, 'starting the command');
    throw mapped instanceof HttpError ? mapped : new HttpError(500, 'the command could not be started', { cause });
  }
  holder.unref();
  const line = await firstLine(holder.stdout);
  holder.stdout.destroy();
  const ready = /^ready (\d+)$/.exec(line ?? '');
  if (ready) return Number(ready[1]);
  holder.kill('SIGKILL');
  throw new HttpError(500, 'the command could not be started', { cause: new Error(`envd-holder said: ${line ?? '(nothing)'}`) });
}

function firstLine(stream: NodeJS.ReadableStream): Promise<string | undefined> {
  return new Promise((resolve) => {
    const lines = createInterface({ input: stream });
    const timer = setTimeout(() => done(undefined), READY_TIMEOUT_MS);
    let answered = false;
    const done = (line: string | undefined) => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      resolve(line);
      // After resolving: close() emits 'close', which must not answer again.
      lines.close();
    };
    lines.once('line', done);
    lines.once('close', () => done(undefined));
  });
}
