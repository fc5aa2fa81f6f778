import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { SandboxState } from '../sandbox-state.js';
import type { ProcessRegistry } from './registry.js';
import { prepareCommand } from './spawn.js';

/**
 * The image's own entrypoint, as rootfs/image-to-template.mjs --entrypoint
 * writes it (the OCI config's Entrypoint + Cmd, User, WorkingDir, Env):
 * `{ "args": [program, ...], "user"?, "cwd"?, "envs"? }`, run without a shell.
 */
interface Entrypoint {
  args: string[];
  user?: string;
  cwd?: string;
  envs?: Record<string, string>;
}

/** Marks, in the state dir (tmpfs: cleared by a reboot, kept across envd restarts), that this boot started it. */
const STARTED_MARK = 'entrypoint-started';

/**
 * Starts the entrypoint once per boot as a background command that envd
 * tracks like any other (listed, attachable, waitable, killable, re-adopted
 * after a restart: a restarted envd never starts it twice). A broken file or
 * a command that cannot start is logged, never fatal: the sandbox still serves.
 */
export async function startEntrypoint(file: string, stateDir: string, state: SandboxState, processes: ProcessRegistry, log: Logger): Promise<void> {
  const mark = join(stateDir, STARTED_MARK);
  try {
    writeFileSync(mark, `${new Date().toISOString()}\n`, { flag: 'wx', mode: 0o600 });
  } catch {
    return; // started by an earlier envd of this boot
  }
  try {
    const entrypoint = JSON.parse(readFileSync(file, 'utf8')) as Entrypoint;
    const [program, ...args] = entrypoint.args ?? [];
    if (typeof program !== 'string') throw new Error('"args" must name a program');
    const prepared = await prepareCommand({ cmd: program, args, user: entrypoint.user, cwd: entrypoint.cwd, envs: entrypoint.envs }, state);
    const proc = await processes.start(prepared, { background: true, timeoutMs: 0 });
    log.info({ pid: proc.pid, args: entrypoint.args }, 'started the image entrypoint');
  } catch (error) {
    log.error({ err: error, file }, 'the image entrypoint could not be started');
  }
}
