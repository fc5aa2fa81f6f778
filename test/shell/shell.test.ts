import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { findProcesses, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';

// `envd shell` from a real terminal: tmux runs it, send-keys types, capture-pane reads the screen.

const TOKEN = 'shell-test-token';
let user: Awaited<ReturnType<typeof commandUser>>;
let envd: EnvdProcess;
let scratch: string;
// A tmux server of its own per test: a server just told to exit cannot take the next test's session.
// Its socket is in this file's own directory (-S), removed at the end: tmux -L left one in /tmp/tmux-UID for every test.
let tests = 0;
let sockets: string;
const socket = () => join(sockets, `test-${tests}`);
const tmux = (...args: string[]) => execFileSync('tmux', ['-S', socket(), ...args], { encoding: 'utf8' });
const screen = () => tmux('capture-pane', '-p', '-t', 'envd');
const untilScreen = (pattern: RegExp, what: string) => waitFor(() => pattern.test(screen()), 15_000, `${what} (screen: ${screen().trim().slice(-300)})`);

/** Runs `envd shell ARGS` in a fresh tmux window; the wrapper records the exit code and the terminal settings before and after. */
function openShell(args: string[]): void {
  const shellCommand = [process.execPath, join(process.cwd(), 'dist/envd.js'), 'shell', ...args].map((a) => `'${a}'`).join(' ');
  const wrapper = `stty -g > ${scratch}/before; ${shellCommand}; echo "exit=$?" > ${scratch}/exit; stty -g > ${scratch}/after; sleep 600`;
  tmux('new-session', '-d', '-s', 'envd', '-x', '100', '-y', '30', 'sh', '-c', wrapper);
}
/** The terminal settings the wrapper saved after envd shell exited: written just after `exit`, so waited for (under load the test once read them before stty had written). */
async function settingsAfter(): Promise<string> {
  const read = () => {
    try {
      return readFileSync(join(scratch, 'after'), 'utf8');
    } catch {
      return '';
    }
  };
  await waitFor(() => read() !== '', 10_000, 'the terminal settings after envd shell');
  return read();
}
const exitFile = () => {
  try {
    return readFileSync(join(scratch, 'exit'), 'utf8').trim();
  } catch {
    return '';
  }
};

beforeAll(async () => {
  sockets = mkdtempSync(join(tmpdir(), 'envd-tmux-'));
  user = await commandUser();
  envd = await startEnvdProcess(['--default-user', user.user.name], { ENVD_ACCESS_TOKEN: TOKEN });
});
afterAll(async () => {
  await envd?.stop();
  user?.remove();
  if (sockets) rmSync(sockets, { recursive: true, force: true });
});
afterEach(() => {
  try {
    tmux('kill-server');
  } catch {
    // no server left
  }
  tests++;
  rmSync(scratch, { recursive: true, force: true });
});

describe('envd shell', () => {
  it('types into a remote login shell, follows the window size, survives Ctrl-C and exits with the remote code', async () => {
    scratch = mkdtempSync(join(tmpdir(), 'envd-shell-'));
    openShell(['--url', envd.url, '--token', TOKEN]);
    tmux('send-keys', '-t', 'envd', 'echo hi-$((40+2)); stty size', 'Enter');
    await untilScreen(/hi-42\s+30 100/, 'the remote shell to answer at the local size');
    tmux('resize-window', '-t', 'envd', '-x', '90', '-y', '25');
    await new Promise((r) => setTimeout(r, 300));
    tmux('send-keys', '-t', 'envd', 'stty size', 'Enter');
    await untilScreen(/25 90/, 'the new size to reach the remote terminal');
    tmux('send-keys', '-t', 'envd', 'sleep 100', 'Enter');
    await waitFor(() => findProcesses('sleep 100').length > 0, 10_000, 'the remote sleep');
    tmux('send-keys', '-t', 'envd', 'C-c');
    await waitFor(() => findProcesses('sleep 100').length === 0, 10_000, 'Ctrl-C to reach the remote job');
    tmux('send-keys', '-t', 'envd', 'echo after-$((1+1))', 'Enter');
    await untilScreen(/after-2/, 'the shell to live on after Ctrl-C');
    tmux('send-keys', '-t', 'envd', 'exit 3', 'Enter');
    await waitFor(() => exitFile() !== '', 10_000, 'envd shell to exit');
    expect(exitFile()).toBe('exit=3');
    expect(await settingsAfter()).toBe(readFileSync(join(scratch, 'before'), 'utf8'));
  });

  it('runs a given command as a given user in a given directory', async () => {
    scratch = mkdtempSync(join(tmpdir(), 'envd-shell-'));
    openShell(['--url', envd.url, '--token', TOKEN, '--user', user.user.name, '--cwd', '/tmp', '--', 'sh', '-c', 'echo "$(id -un) in $(pwd)"; exit 4']);
    await waitFor(() => exitFile() !== '', 15_000, 'envd shell to exit');
    expect(screen()).toContain(`${user.user.name} in /tmp`);
    expect(exitFile()).toBe('exit=4');
  });

  it('restores the terminal and says why when the connection to envd breaks', async () => {
    scratch = mkdtempSync(join(tmpdir(), 'envd-shell-'));
    const victim = await startEnvdProcess(['--default-user', user.user.name], { ENVD_ACCESS_TOKEN: TOKEN });
    openShell(['--url', victim.url, '--token', TOKEN, '--', 'sh', '-c', 'echo remote-up; sleep 1000']);
    // Up and followed: the output came back through the stream.
    await untilScreen(/remote-up/, 'the remote command to print');
    await victim.stop('SIGKILL');
    await waitFor(() => exitFile() !== '', 10_000, 'envd shell to exit');
    expect(exitFile()).toBe('exit=1');
    expect(screen()).toMatch(/envd shell: .*(connection to envd|cannot reach envd)/);
    expect(await settingsAfter()).toBe(readFileSync(join(scratch, 'before'), 'utf8'));
    for (const pid of findProcesses('sleep 1000')) process.kill(pid, 'SIGKILL');
  });

  it('restores the terminal and ends the remote command when the local process is interrupted', async () => {
    scratch = mkdtempSync(join(tmpdir(), 'envd-shell-'));
    openShell(['--url', envd.url, '--token', TOKEN, '--', 'sleep', '1001']);
    await waitFor(() => findProcesses('sleep 1001').length > 0, 15_000, 'the remote command');
    const [local] = findProcesses('envd.js shell');
    process.kill(local!, 'SIGINT');
    await waitFor(() => exitFile() !== '', 10_000, 'envd shell to exit');
    expect(exitFile()).toBe('exit=130');
    expect(await settingsAfter()).toBe(readFileSync(join(scratch, 'before'), 'utf8'));
    await waitFor(() => findProcesses('sleep 1001').length === 0, 10_000, 'the remote command to be killed');
  });

  it('explains a wrong token and a bad URL with a clear message and no raw terminal left behind', () => {
    const run = (args: string[]) => {
      try {
        execFileSync(process.execPath, ['dist/envd.js', 'shell', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
        return { status: 0, stderr: '' };
      } catch (error) {
        const failed = error as { status: number; stderr: string };
        return { status: failed.status, stderr: failed.stderr };
      }
    };
    const wrong = run(['--url', envd.url, '--token', 'nope']);
    expect(wrong.status).toBe(1);
    expect(wrong.stderr).toMatch(/401 invalid access token/);
    const bad = run(['--url', 'ftp://x']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--url/);
  });
});
