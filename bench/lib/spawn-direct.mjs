// The baseline for the command figures: the same login-shell invocation envd
// makes, spawned straight from Node — its own process group (detached), stdin
// /dev/null, stdout and stderr piped and collected, the user's environment.
//
// Both sides run their commands as COMMAND_USER: the running user, or `nobody`
// when the bench runs as root. Root's login shell here runs `pyenv init`
// (~0.7 s on one machine) and leaves a `pyenv rehash` behind each time, which
// under 8 commands in flight piled up into tens of processes: the exec figures
// measured pyenv (0.9 commands/s, 7 minutes for one figure), not envd.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { userInfo } from 'node:os';

function commandUser() {
  if (process.getuid?.() !== 0) {
    const me = userInfo();
    return { name: me.username, uid: me.uid, gid: me.gid, home: me.homedir, shell: me.shell ?? '/bin/bash' };
  }
  const [name, , uid, gid, , home, shell] = execFileSync('getent', ['passwd', 'nobody'], { encoding: 'utf8' }).trim().split(':');
  return { name, uid: Number(uid), gid: Number(gid), home, shell };
}

/** Whom the command figures run their commands as, on both sides: pass `user: COMMAND_USER.name` to envd. */
export const COMMAND_USER = commandUser();
const switchUser = COMMAND_USER.uid !== process.getuid?.();

/** What envd gives a command of that user with no sandbox or request envs. */
export const COMMAND_ENV = {
  PATH: process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  HOME: COMMAND_USER.home,
  USER: COMMAND_USER.name,
  LOGNAME: COMMAND_USER.name,
  SHELL: COMMAND_USER.shell,
};

/** Runs `bash -l -c cmd` (through setpriv, as envd does, for another user) and resolves when it has exited and its pipes have closed. */
export function spawnLoginShell(cmd, { onStdout } = {}) {
  return new Promise((resolve, reject) => {
    const shell = ['/bin/bash', '-l', '-c', cmd];
    const [file, ...args] = switchUser ? ['setpriv', `--reuid=${COMMAND_USER.uid}`, `--regid=${COMMAND_USER.gid}`, '--init-groups', '--', ...shell] : shell;
    const child = spawn(file, args, {
      // envd's choice for a user without a home: /
      cwd: existsSync(COMMAND_USER.home) ? COMMAND_USER.home : '/',
      env: COMMAND_ENV,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdoutBytes = 0;
    const stdout = [];
    const stderr = [];
    child.stdout.on('data', (chunk) => {
      stdoutBytes += chunk.length;
      if (onStdout) onStdout(chunk);
      else stdout.push(chunk);
    });
    child.stderr.on('data', (chunk) => stderr.push(chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdoutBytes, stdout: Buffer.concat(stdout).toString('utf8'), stderr: Buffer.concat(stderr).toString('utf8') }));
  });
}
