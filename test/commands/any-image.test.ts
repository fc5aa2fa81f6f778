// Commands in any image (issue 25): a command line runs in bash, else sh, else
// the user's shell, and an image with none gets a 400 saying so; a program can
// run with no shell at all (`args`); a terminal works where /dev/pts was never
// mounted.
import { describe, expect, it } from 'vitest';
import { shellCommand } from '../../src/commands/spawn.js';
import { parseLog, readLog, startHolder, useHolders } from '../helpers/holder.js';
import { useCommandServer } from '../helpers/command-user.js';

const fixture = useCommandServer();
useHolders();

const user = { name: 'u', uid: 1000, gid: 1000, home: '/home/u', shell: '/usr/local/bin/fish' };
const present = (...paths: string[]) => (path: string) => paths.includes(path);

describe('the shell of a command line', () => {
  it('is bash where there is one, sh where there is not, and the user\'s shell in an image with neither', () => {
    expect(shellCommand('echo hi', user, present('/bin/bash', '/bin/sh', user.shell))).toEqual(['/bin/bash', ['-l', '-c', 'echo hi']]);
    expect(shellCommand('echo hi', user, present('/usr/bin/bash'))).toEqual(['/usr/bin/bash', ['-l', '-c', 'echo hi']]);
    expect(shellCommand('echo hi', user, present('/bin/sh', user.shell))).toEqual(['/bin/sh', ['-l', '-c', 'echo hi']]);
    expect(shellCommand('echo hi', user, present(user.shell))).toEqual([user.shell, ['-l', '-c', 'echo hi']]);
  });

  it("is the user's own login shell on a terminal without a command, else bash or sh", () => {
    expect(shellCommand('', user, present('/bin/bash', user.shell))).toEqual([user.shell, ['-l']]);
    expect(shellCommand('', user, present('/bin/sh'))).toEqual(['/bin/sh', ['-l']]);
  });

  it('is a 400 naming what the image lacks when it has no shell at all', () => {
    expect(() => shellCommand('echo hi', user, present())).toThrow(/this image has no shell to run it in \(none of \/bin\/bash, \/usr\/bin\/bash, \/bin\/sh, \/usr\/bin\/sh, \/usr\/local\/bin\/fish is an executable file\); give the program and its arguments as "cmd" and "args"/);
    try {
      shellCommand('x', user, present());
    } catch (error) {
      expect(error).toMatchObject({ status: 400 });
    }
  });
});

describe('a program without a shell (args)', () => {
  it('runs the program with its arguments as they are: no expansion, no profile', async () => {
    const { status, body } = await fixture.server.json('POST', '/commands', { cmd: 'printf', args: ['%s|', 'a b', '$HOME', '*'] });
    expect(status).toBe(200);
    expect(body).toEqual({ stdout: 'a b|$HOME|*|', stderr: '', exit_code: 0, reason: 'exited' });
  });

  it('lists the arguments, and answers 400 for a program that is not in PATH or not executable', async () => {
    const { body } = await fixture.server.json('POST', '/commands', { cmd: 'sleep', args: ['30'], background: true });
    const listed = (await fixture.server.json('GET', '/commands')).body.processes.find((p: any) => p.pid === body.pid);
    expect(listed).toMatchObject({ cmd: 'sleep', args: ['30'] });
    await fixture.server.json('DELETE', `/commands/${body.pid}`);
    const missing = await fixture.server.json('POST', '/commands', { cmd: 'no-such-program-envd', args: [] });
    expect(missing.status).toBe(400);
    expect(missing.body.message).toMatch(/^body\/cmd: "no-such-program-envd" was not found in the command's PATH/);
    const notExecutable = await fixture.server.json('POST', '/commands', { cmd: '/etc/passwd', args: [] });
    expect(notExecutable).toEqual({ status: 400, body: { message: 'body/cmd: /etc/passwd is not an executable file' } });
  });
});

describe('a terminal where /dev/pts is not mounted', () => {
  it('mounts devpts itself and runs the command on a terminal of the size asked for', async () => {
    // A mount namespace of its own, where /dev/pts is unmounted before the holder starts.
    const holder = await startHolder({
      command: ['sh', '-c', 'stty size; tty'],
      pty: { cols: 100, rows: 30 },
      launcher: ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', 'while grep -q " /dev/pts " /proc/self/mounts; do umount -l /dev/pts || exit 1; done; exec "$0" "$@"'],
    });
    expect(await holder.exited).toBe(0);
    expect(parseLog(readLog(holder.dir)).stdout.toString()).toMatch(/^30 100\r\n\/dev\/pts\/\d+\r\n$/);
  });
});
