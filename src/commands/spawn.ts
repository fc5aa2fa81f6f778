import { accessSync, constants } from 'node:fs';
import { stat } from 'node:fs/promises';
import { isAbsolute } from 'node:path';
import { badRequest, HttpError } from '../errors.js';
import type { SandboxState } from '../sandbox-state.js';
import { resolveUser, type UnixUser } from '../users.js';
import type { PtySize } from './meta.js';

/** envd's own PATH for commands; a login shell's /etc/profile may replace it. */
export const BASE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** What a terminal command sees as TERM unless its request's envs set one: what xterm.js and most emulators speak. */
export const DEFAULT_TERM = 'xterm-256color';

const SETPRIV_CANDIDATES = ['/usr/bin/setpriv', '/bin/setpriv'];

export interface CommandRequest {
  /** Required without a pty; with one, absent or empty runs the user's interactive login shell. */
  cmd?: string | undefined;
  pty?: PtySize | undefined;
  cwd?: string | undefined;
  envs?: Record<string, string> | undefined;
  user?: string | undefined;
  stdin?: boolean | undefined;
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
}

/**
 * Resolves the user, working directory and environment of a command, throwing
 * a 4xx for anything the client got wrong. Nothing is started here, so the
 * stream route can still answer plain JSON errors.
 */
export async function prepareCommand(request: CommandRequest, state: SandboxState): Promise<PreparedCommand> {
  const cmd = request.cmd ?? '';
  if (request.pty === undefined) {
    if (request.cmd === undefined) throw badRequest("body must have required property 'cmd'");
    if (cmd === '') throw badRequest('body/cmd must NOT have fewer than 1 characters');
  }
  rejectNul(cmd, 'body/cmd');
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
  const bash = existsExecutable('/bin/bash') ? '/bin/bash' : '/bin/sh';
  // No command on a terminal: the user's own login shell, interactive because its stdin is a terminal.
  const [shell, shellArgs] = cmd === '' ? [existsExecutable(user.shell) ? user.shell : bash, ['-l']] : [bash, ['-l', '-c', cmd]];
  const env: Record<string, string> = {
    PATH: BASE_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    SHELL: user.shell,
    ...state.envs,
    ...(request.pty ? { TERM: DEFAULT_TERM } : {}),
    ...request.envs,
  };
  const base = { cmd, pty: request.pty, user, cwd, env, stdin: request.stdin ?? false };
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

