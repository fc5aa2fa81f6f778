// The baseline for the command figures: the same login-shell invocation envd
// makes, spawned straight from Node — its own process group (detached), stdin
// /dev/null, stdout and stderr piped and collected, the user's environment.
import { spawn } from 'node:child_process';
import { userInfo } from 'node:os';

const user = userInfo();

/** What envd gives a command of the running user with no sandbox or request envs. */
export const COMMAND_ENV = {
  PATH: process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  HOME: user.homedir,
  USER: user.username,
  LOGNAME: user.username,
  SHELL: user.shell ?? '/bin/bash',
};

/** Runs `bash -l -c cmd` and resolves when it has exited and its pipes have closed, with the byte counts it printed. */
export function spawnLoginShell(cmd, { onStdout } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn('/bin/bash', ['-l', '-c', cmd], {
      cwd: user.homedir,
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
