import { spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';

/** Whether this machine lets a test mount FUSE itself: /dev/fuse, and root. */
export const canMountFuse = existsSync('/dev/fuse') && process.getuid?.() === 0;

/**
 * Mounts at `point` a FUSE file system whose daemon never answers: this
 * process holds the only /dev/fuse fd and never reads a request, so every
 * call into the mount waits (killably) in the kernel. A real hang, the
 * kind a network mount whose server went away makes. Returns what ends it:
 * closing the fd aborts the connection (every waiter gets ENOTCONN), then the
 * mount goes (lazily). Call it before removing anything around `point`: an
 * lstat of a hung mount point waits for ever.
 */
export function mountHungFuse(point: string): () => void {
  let fuse: number | undefined = openSync('/dev/fuse', 'r+');
  // -i: no mount.fuse helper; the kernel takes the fd as its daemon's end (fd 3 in mount's process).
  const mounted = spawnSync('mount', ['-i', '-t', 'fuse', '-o', 'fd=3,rootmode=40000,user_id=0,group_id=0', 'envd-hung', point], { stdio: ['ignore', 'ignore', 'pipe', fuse], encoding: 'utf8' });
  if (mounted.status !== 0) {
    closeSync(fuse);
    throw new Error(`mount -t fuse failed: ${mounted.stderr}`);
  }
  return () => {
    // Once only: after its close the fd number may be someone else's.
    if (fuse !== undefined) closeSync(fuse);
    fuse = undefined;
    spawnSync('umount', ['-l', point]);
  };
}
