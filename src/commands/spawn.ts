import { checkLimits, mergeLimits, type Limits } from '../cgroups/limits.js';
import { accessSync, constants } from 'node:fs';
import { stat } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { badRequest, HttpError } from '../errors.js';
import type { SandboxState } from '../sandbox-state.js';
import { resolveUser, userGroups, type UnixUser } from '../users.js';
import type { PtySize } from './meta.js';

/** envd's own PATH for commands; a login shell's /etc/profile may replace it. */
export const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** What a terminal command sees as TERM unless its request's envs set one: what xterm.js and most emulators speak. */
export const DEFAULT_TERM = 'xterm-256color';

/** The shells a command line runs in, in order of preference; then the user's own (docs/api.md). */
export const SHELLS = ['/bin/bash', '/usr/bin/bash', '/bin/sh', '/usr/bin/sh'];

export interface CommandRequest {
  /** Required without a pty; with one, absent or empty runs the user's interactive login shell. */
  cmd?: string | undefined;
  /** With args, `cmd` is a program run with these arguments and no shell. */
  args?: string[] | undefined;
  pty?: PtySize | undefined;
  cwd?: string | undefined;
  envs?: Record<string, string> | undefined;
  user?: string | undefined;
  stdin?: boolean | undefined;
  limits?: Limits | undefined;
}

/** Who the holder makes the command's process before it runs it (it stays root itself). */
export interface UserSwitch {
  uid: number;
  gid: number;
  groups: number[];
}

/** Everything needed to start a command, resolved and checked before anything runs. */
export interface PreparedCommand {
  cmd: string;
  pty: PtySize | undefined;
  user: UnixUser;
  cwd: string;
  env: Record<string, string>;
  file: string;
  args: string[];
  stdin: boolean;
  /** The request's `args` (a program run without a shell), for the listing. */
  argv: string[] | undefined;
  /** Undefined: the command runs as envd does. */
  switchTo: UserSwitch | undefined;
  /** The request's limits over the sandbox's default_limits; undefined when neither has any. */
  limits: Limits | undefined;
}

/**
 * Resolves the user, working directory, environment and program of a
 * command, throwing a 4xx for anything the client got wrong or the image
 * lacks. Nothing is started here, so the stream route can still answer plain
 * JSON errors.
 */
export async function prepareCommand(request: CommandRequest, state: SandboxState): Promise<PreparedCommand> {
  const cmd = request.cmd ?? '';
  if (request.pty === undefined || request.args !== undefined) {
    if (request.cmd === undefined) throw badRequest("body must have required property 'cmd'");
    if (cmd === '') throw badRequest('body/cmd must NOT have fewer than 1 characters');
  }
  rejectNul(cmd, 'body/cmd');
  for (const [i, arg] of (request.args ?? []).entries()) rejectNul(arg, `body/args/${i}`);
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
  const env: Record<string, string> = {
    PATH: BASE_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    SHELL: user.shell,
    ...state.trustStoreEnvs,
    ...state.envs,
    ...(request.pty ? { TERM: DEFAULT_TERM } : {}),
    ...request.envs,
  };
  const [file, args] = request.args !== undefined ? [findProgram(cmd, env.PATH!), request.args] : shellCommand(cmd, user);
  // The holder enters the user itself (groups from /etc/group, then gid, then uid): no setpriv in the image.
  const switchTo = runningUid === 0 && user.uid !== 0 ? { uid: user.uid, gid: user.gid, groups: await userGroups(user) } : undefined;
  const limits = mergeLimits(state.defaultLimits, request.limits && checkLimits(request.limits, 'body/limits'));
  return { cmd, pty: request.pty, user, cwd, env, file, args, stdin: request.stdin ?? false, argv: request.args, switchTo, limits };
}

/**
 * A command line in a login shell: bash, else sh, else the user's own shell
 * (an image may have none of the first). An empty one on a terminal is the
 * user's interactive login shell, or the first of the others.
 */
export function shellCommand(cmd: string, user: UnixUser, isExecutable = existsExecutable): [string, string[]] {
  const candidates = cmd === '' ? [user.shell, ...SHELLS] : [...SHELLS, user.shell];
  const shell = candidates.find(isExecutable);
  if (!shell) {
    throw badRequest(
      `body/cmd: this image has no shell to run it in (none of ${[...SHELLS, user.shell].join(', ')} is an executable file); ` +
        'give the program and its arguments as "cmd" and "args" to run it without one',
    );
  }
  return cmd === '' ? [shell, ['-l']] : [shell, ['-l', '-c', cmd]];
}

/** A program as the holder's execvp finds it in the command's PATH; a 400 when it would not. */
function findProgram(program: string, path: string): string {
  if (program.includes('/')) {
    if (!isAbsolute(program)) return program; // relative to the command's cwd: execvp decides
    if (existsExecutable(program)) return program;
    throw badRequest(`body/cmd: ${program} is not an executable file`);
  }
  for (const dir of path.split(':')) if (dir !== '' && existsExecutable(join(dir, program))) return program;
  throw badRequest(`body/cmd: ${JSON.stringify(program)} was not found in the command's PATH (${path})`);
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
