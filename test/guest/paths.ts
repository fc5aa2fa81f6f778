import { readdirSync } from 'node:fs';
import { join } from 'node:path';

export const GUEST_CACHE = process.env.ENVD_GUEST_CACHE ?? join(process.cwd(), '.cache/guest');
export const ROOTFS_DIR = join(GUEST_CACHE, 'rootfs');
export const IMAGE_FILE = join(GUEST_CACHE, 'image.ext4');
/** The busybox + musl template, no glibc and no systemd (rootfs/build-busybox-image.sh). */
export const BUSYBOX_IMAGE_FILE = join(GUEST_CACHE, 'busybox.ext4');
export const ENVD_PORT = 49983;

/** The kernel directory build-kernel.sh made (one per kernel release). */
export function findKernel(): { kernel: string; initrd: string } {
  const dir = readdirSync(GUEST_CACHE).filter((name) => name.startsWith('kernel-')).sort().at(-1);
  if (!dir) throw new Error(`no kernel under ${GUEST_CACHE}; run rootfs/build-kernel.sh`);
  const files = readdirSync(join(GUEST_CACHE, dir));
  // The uncompressed ELF boots through PVH, skipping the decompressor; vmlinuz is the fallback.
  const kernel = files.includes('vmlinux') ? 'vmlinux' : 'vmlinuz';
  return { kernel: join(GUEST_CACHE, dir, kernel), initrd: join(GUEST_CACHE, dir, 'initrd.img') };
}
