import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants } from 'node:fs';
import { stat } from 'node:fs/promises';
import { isAbsolute } from 'node:path';
import { badRequest, errnoToHttpError, HttpError } from '../errors.js';
import type { SandboxState } from '../sandbox-state.js';
import { resolveUser, type UnixUser } from '../users.js';

/** envd's own PATH for commands; a login shell's /etc/profile may replace it. */
export const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const SETPRIV_CANDIDATES = ['/usr/bin/setpriv', '/bin/setpriv'];

export interface CommandRequest {
  cmd: string;
  cwd?: string | undefined;
  envs?: Record<string, string> | undefined;
  user?: string | undefined;
  stdin?: boolean | undefined;
}

/** Everything needed to start a command, resolved and checked before anything runs. */
export interface PreparedCommand {
  cmd: string;
  user: UnixUser;
  cwd: string;
  env: Record<string, string>;
  file: string;
  args: string[];
  stdin: boolean;
}

/**
 * Resolves the user, working directory and environment of a command, throwing
 * a 4xx for anything the client got wrong. Nothing is started here, so the
 * stream route can still answer plain JSON errors.
 */
export async function prepareCommand(request: CommandRequest, state: SandboxState): Promise<PreparedCommand> {
  rejectNul(request.cmd, 'body/cmd');
  for (const [name, value] of Object.entries(request.envs ?? {})) {
    if (name === '' || name.includes('=') || name.includes('\0')) throw badRequest(`body/envs: invalid variable name ${JSON.stringify(name)}`);
    rejectNul(value, `body/envs/${name}`);
  }
  const user = await resolveUser(request.user ?? state.defaultUser, request.user === undefined ? 'default_user' : 'body/user');
  const runningUid = process.getuid!();
  if (runningUid !== 0 && user.uid !== runningUid) {
    throw new HttpError(403, `body/user: envd runs as uid ${runningUid} without root, so it cannot run commands as ${JSON.stringify(user.name)}`);
  }
  const cwd = await resolveCwd(request.cwd, state, user);
  const shell = existsExecutable('/bin/bash') ? '/bin/bash' : '/bin/sh';
  const shellArgs = ['-l', '-c', request.cmd];
  const env: Record<string, string> = {
    PATH: BASE_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    SHELL: user.shell,
    ...state.envs,
    ...request.envs,
  };
  const base = { cmd: request.cmd, user, cwd, env, stdin: request.stdin ?? false };
  if (runningUid === 0 && user.uid !== 0) {
    // libuv's uid/gid switch calls setgroups(0) and drops every supplementary
    // group; setpriv --init-groups gives the user their groups, then execs the
    // shell, so the pid we track stays the shell's.
    const setpriv = SETPRIV_CANDIDATES.find(existsExecutable);
    if (!setpriv) throw new HttpError(500, 'setpriv (util-linux) is missing, so envd cannot switch users');
    return { ...base, file: setpriv, args: [`--reuid=${user.uid}`, `--regid=${user.gid}`, '--init-groups', '--', shell, ...shellArgs] };
  }
  return { ...base, file: shell, args: shellArgs };
}

async function resolveCwd(requested: string | undefined, state: SandboxState, user: UnixUser): Promise<string> {
  if (requested !== undefined) {
    rejectNul(requested, 'body/cwd');
    if (!isAbsolute(requested)) throw badRequest(`body/cwd must be an absolute path, got ${JSON.stringify(requested)}`);
    const info = await stat(requested).catch(() => undefined);
    if (!info) throw badRequest(`body/cwd: ${requested} does not exist`);
    if (!info.isDirectory()) throw badRequest(`body/cwd: ${requested} is not a directory`);
    return requested;
  }
  if (state.defaultWorkdir !== undefined) return state.defaultWorkdir;
  const home = await stat(user.home).catch(() => undefined);
  return home?.isDirectory() ? user.home : '/';
}

function rejectNul(value: string, field: string): void {
  if (value.includes('\0')) throw badRequest(`${field} must not contain a NUL byte`);
}

function existsExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export type Subprocess = ChildProcessByStdio<import('node:stream').Writable | null, import('node:stream').Readable, import('node:stream').Readable>;

/**
 * Starts the prepared command; throws if the OS refused to create the process
 * (EMFILE/ENFILE/EAGAIN become 503: envd is out of descriptors or processes
 * for the moment, and the caller may retry).
 *
 * node:child_process rather than execa: execa 9 iterates `subprocess.stdio`
 * before it attaches its error listener, and Node leaves that undefined when
 * spawn fails (EMFILE), so the ChildProcess 'error' went unhandled and took
 * envd down (found by the fd-exhaustion stress test). Here the listener is
 * attached before anything else can throw.

 */
export async function startCommand(prepared: PreparedCommand): Promise<{ subprocess: Subprocess }> {
  const subprocess = spawn(prepared.file, prepared.args, {
    cwd: prepared.cwd,
    env: prepared.env,
    // The shell leads a new session and process group, so one kill reaches all it starts.
    detached: true,
    stdio: [prepared.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  }) as Subprocess;
  if (subprocess.pid === undefined) {
    const [cause] = (await once(subprocess, 'error')) as [NodeJS.ErrnoException];
    const mapped = errnoToHttpError(cause, 'starting the command');
    throw mapped instanceof HttpError ? mapped : new HttpError(500, 'the command could not be started', { cause });
  }
  return { subprocess };
}
