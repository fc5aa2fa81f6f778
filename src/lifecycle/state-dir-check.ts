import { statfsSync } from 'node:fs';
import type { Logger } from '../logger.js';

/** statfs(2)'s f_type of a tmpfs (linux/magic.h). */
const TMPFS_MAGIC = 0x01021994;

/**
 * Warns when the state directory is not on a tmpfs. Every command creates
 * and later removes a few small files there; on an ext4 disk the inode
 * allocator's search past recently deleted inodes took the holders 38 % of
 * the CPU under a stream of commands and halved exec throughput
 * (docs/operations.md). A guest's /run is a tmpfs; a host's may not be.
 */
export function warnIfStateDirNotTmpfs(stateDir: string, logger: Logger): void {
  const type = statfsSync(stateDir).type;
  if (type === TMPFS_MAGIC) return;
  logger.warn({ stateDir, fsType: `0x${type.toString(16)}` }, 'the state directory is not on a tmpfs: commands cost more CPU there (docs/operations.md)');
}
