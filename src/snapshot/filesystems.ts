import { readFile } from 'node:fs/promises';

/** A mounted filesystem that FIFREEZE applies to. */
export interface BlockMount {
  /** Where it is mounted (the first mount point of its device). */
  path: string;
  /** major:minor of its device: bind mounts of one filesystem share it, and a filesystem is frozen once. */
  device: string;
  type: string;
}

/** Filesystems on /dev/* that are no block devices. */
const NOT_BLOCK = new Set(['devtmpfs', 'tmpfs', 'devpts', 'mqueue', 'hugetlbfs']);

/**
 * The writable filesystems on block devices in /proc/self/mountinfo's text,
 * one per device, the deepest mount points first (their thaw is the reverse).
 * tmpfs, proc, overlay and the like have nothing on a disk to keep consistent;
 * read-only ones take no writes to stop.
 */
export function writableBlockMounts(mountinfo: string): BlockMount[] {
  const byDevice = new Map<string, BlockMount>();
  for (const line of mountinfo.split('\n')) {
    // id parent major:minor root mountpoint options [optional...] - type source superoptions
    const [before, after] = line.split(' - ');
    if (before === undefined || after === undefined) continue;
    const fields = before.split(' ');
    const [type, source, superOptions] = after.split(' ');
    const device = fields[2];
    const path = fields[4];
    const options = fields[5];
    if (!device || !path || !options || !type || !source || !superOptions) continue;
    if (!source.startsWith('/dev/') || NOT_BLOCK.has(type)) continue;
    if (!options.split(',').includes('rw') || !superOptions.split(',').includes('rw')) continue;
    if (!byDevice.has(device)) byDevice.set(device, { path: unescapeMountPath(path), device, type });
  }
  return [...byDevice.values()].sort((a, b) => b.path.length - a.path.length);
}

/** The machine's own: what `fsfreeze: true` freezes in a guest. */
export async function systemBlockMounts(): Promise<BlockMount[]> {
  return writableBlockMounts(await readFile('/proc/self/mountinfo', 'utf8'));
}

/** mountinfo writes space, tab, newline and backslash in octal (\040). */
function unescapeMountPath(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_match, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}
