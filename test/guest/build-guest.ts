import { execFileSync } from 'node:child_process';

/** Builds (or reuses from .cache/guest/) the root filesystems, the ext4 images (Debian and busybox) and the kernel, once per run. */
export function setup(): void {
  const started = Date.now();
  execFileSync('rootfs/build-image.sh', { stdio: 'inherit' });
  execFileSync('rootfs/build-busybox-image.sh', { stdio: 'inherit' });
  execFileSync('rootfs/build-kernel.sh', { stdio: ['ignore', 'ignore', 'inherit'] });
  console.log(`guest: image and kernel ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
