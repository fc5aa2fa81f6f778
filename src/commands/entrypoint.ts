import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Limits } from '../cgroups/limits.js';
import type { SandboxState } from '../sandbox-state.js';
import { findUser, type UnixUser } from '../users.js';
import type { ProcessRegistry } from './registry.js';
import { prepareCommand, type PreparedCommand } from './spawn.js';

/**
 * The image's own entrypoint, as rootfs/image-to-template.mjs --entrypoint
 * writes it (the OCI config's Entrypoint + Cmd, User, WorkingDir, Env):
 * `{ "args": [program, ...], "user"?, "cwd"?, "envs"? }`, run without a shell.
 * `user` is the config's User as Docker takes it: `name`, `uid`, `name:group`
 * or `uid:gid`; a uid needs no line in /etc/passwd.
 */
interface Entrypoint {
  args: string[];
  user?: string;
  cwd?: string;
  envs?: Record<string, string>;
  /** A service's limits (src/services): the entrypoint file has none. */
  limits?: Limits;
}

/** Marks, in the state dir (tmpfs: cleared by a reboot, kept across envd restarts), that this boot started it. */
const STARTED_MARK = 'entrypoint-started';

const NUMERIC = /^\d+$/;

/**
 * Starts the entrypoint once per boot as a background command that envd
 * tracks like any other (listed, attachable, waitable, killable, re-adopted
 * after a restart: a restarted envd never starts it twice). The mark is
 * written once it has started, so an entrypoint that could not start is tried
 * again by the next envd of this boot. A broken file or a command that cannot
 * start is logged, never fatal: the sandbox still serves.
 */
export async function startEntrypoint(file: string, stateDir: string, state: SandboxState, processes: ProcessRegistry, log: Logger): Promise<void> {
  const mark = join(stateDir, STARTED_MARK);
  if (existsSync(mark)) return; // started by an earlier envd of this boot
  try {
    const entrypoint = JSON.parse(readFileSync(file, 'utf8')) as Entrypoint;
    const [program, ...args] = entrypoint.args ?? [];
    if (typeof program !== 'string') throw new Error('"args" must name a program');
    const prepared = await prepareEntrypoint(program, args, entrypoint, state);
    const proc = await processes.start(prepared, { background: true, timeoutMs: 0 });
    writeFileSync(mark, `${new Date().toISOString()} ${proc.pid}\n`, { mode: 0o600 });
    log.info({ pid: proc.pid, args: entrypoint.args }, 'started the image entrypoint');
  } catch (error) {
    log.error({ err: error, file }, 'the image entrypoint could not be started');
  }
}

/**
 * The command, as the entrypoint's user: by name, or by a uid that /etc/passwd may not know. `args`
 * undefined: `program` is a command line for the shell (a service's `cmd` without `args`).
 */
export async function prepareEntrypoint(program: string, args: string[] | undefined, entrypoint: Omit<Entrypoint, 'args'>, state: SandboxState): Promise<PreparedCommand> {
  const request = { cmd: program, args, cwd: entrypoint.cwd, envs: entrypoint.envs, limits: entrypoint.limits };
  if (entrypoint.user === undefined) return prepareCommand(request, state);
  const [who = '', group] = entrypoint.user.split(':');
  const named = NUMERIC.test(who) ? await userWithUid(Number(who)) : await findUser(who);
  if (named && group === undefined) return prepareCommand({ ...request, user: named.name }, state);
  if (!named && !NUMERIC.test(who)) throw new Error(`unknown user ${JSON.stringify(who)}`);
  const gid = group === undefined ? Number(who) : groupId(group);
  const user: UnixUser = named ? { ...named, gid } : { name: who, uid: Number(who), gid, home: '/', shell: '/bin/sh' };
  // Prepared as root (always known), then handed to the uid: the holder switches by number.
  const asRoot = await prepareCommand({ ...request, user: 'root', cwd: entrypoint.cwd ?? (named && existsSync(named.home) ? named.home : '/') }, state);
  return {
    ...asRoot,
    user,
    env: { ...asRoot.env, HOME: user.home, USER: user.name, LOGNAME: user.name, SHELL: user.shell, ...entrypoint.envs },
    switchTo: user.uid === 0 && gid === 0 ? undefined : { uid: user.uid, gid, groups: [gid] },
  };
}

/** The /etc/passwd user with this uid, if any. */
async function userWithUid(uid: number): Promise<UnixUser | undefined> {
  for (const line of readIfPresent('/etc/passwd').split('\n')) {
    const fields = line.split(':');
    if (fields.length >= 7 && fields[2] === String(uid)) return findUser(fields[0]!);
  }
  return uid === 0 ? findUser('root') : undefined;
}

/** A gid, or the gid of a group named in /etc/group. */
function groupId(group: string): number {
  if (NUMERIC.test(group)) return Number(group);
  for (const line of readIfPresent('/etc/group').split('\n')) {
    const [name, , gid] = line.split(':');
    if (name === group && gid !== undefined && NUMERIC.test(gid)) return Number(gid);
  }
  throw new Error(`unknown group ${JSON.stringify(group)}`);
}

function readIfPresent(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}
