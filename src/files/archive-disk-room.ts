import { statfsSync } from 'node:fs';
import { HttpError } from '../errors.js';

/** Free space an archive must leave on the disk: the sandbox's own work needs some too. */
export const DISK_RESERVE_BYTES = 64 * 1024 * 1024;
/** The disk is asked again after this much written, or this many entries. */
const RECHECK_BYTES = 16 * 1024 * 1024;
const RECHECK_ENTRIES = 1_000;

/** How much an extraction may still write into `root`'s file system before it asks the disk again. */
export class DiskRoom {
  private bytes = 0;
  private entries = 0;

  constructor(private readonly root: string) {}

  /**
   * 413 when writing `bytes` more would leave the disk with less than its
   * reserve. The disk is asked again after 16 MiB or 1,000 entries, not for
   * every small file: others write meanwhile, and the 64 MiB reserve absorbs that.
   */
  ensure(bytes: number, name: string): void {
    if (bytes <= this.bytes && this.entries > 0) {
      this.bytes -= bytes;
      this.entries--;
      return;
    }
    const disk = statfsSync(this.root);
    const free = disk.bavail * disk.bsize;
    if (bytes > free - DISK_RESERVE_BYTES) {
      throw new HttpError(413, `archive entry ${JSON.stringify(name)}: ${bytes} bytes would leave less than ${DISK_RESERVE_BYTES} bytes free on the disk (${free} free); nothing was written`);
    }
    this.bytes = Math.min(free - DISK_RESERVE_BYTES, RECHECK_BYTES) - bytes;
    this.entries = RECHECK_ENTRIES;
  }
}
