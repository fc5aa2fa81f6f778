import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { ENVD_PORT, ROOTFS_DIR } from './paths.js';

export interface NspawnGuest {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/**
 * Boots the root filesystem with systemd-nspawn inside a network namespace of its own,
 * joined to the host by a veth pair on a private /30 that exists only on this machine.
 * `index` keeps names and addresses apart if several guests run at once.
 */
export async function startNspawn(logFile: string, index = 0): Promise<NspawnGuest> {
  const netns = `envd-guest-${process.pid}-${index}`;
  const hostIf = `eg${process.pid % 100000}h${index}`;
  const guestIf = `eg${process.pid % 100000}g${index}`;
  const hostAddr = `10.213.${index}.1`;
  const guestAddr = `10.213.${index}.2`;
  ip('netns', 'add', netns);
  ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', guestIf);
  ip('link', 'set', guestIf, 'netns', netns);
  ip('addr', 'add', `${hostAddr}/30`, 'dev', hostIf);
  ip('link', 'set', hostIf, 'up');
  ip('-n', netns, 'addr', 'add', `${guestAddr}/30`, 'dev', guestIf);
  ip('-n', netns, 'link', 'set', guestIf, 'up');
  ip('-n', netns, 'link', 'set', 'lo', 'up');

  const log = createWriteStream(logFile);
  const child = spawn('systemd-nspawn', ['--quiet', '--register=no', '--keep-unit', '-D', ROOTFS_DIR, `--network-namespace-path=/run/netns/${netns}`, '--boot'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);

  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    url: `http://${guestAddr}:${ENVD_PORT}`,
    child,
    async stop() {
      // SIGTERM asks the container's systemd to power off; whatever is left in the
      // namespace after that (only our guest's processes live there) is killed.
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      try {
        const pids = execFileSync('ip', ['netns', 'pids', netns], { encoding: 'utf8' }).split('\n').filter(Boolean);
        for (const pid of pids) process.kill(Number(pid), 'SIGKILL');
      } catch {
        // namespace already empty
      }
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
      try {
        ip('link', 'del', hostIf);
      } catch {
        // went away with the namespace
      }
      ip('netns', 'del', netns);
      log.end();
    },
  };
}
