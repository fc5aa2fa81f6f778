import { readFile, writeFile } from 'node:fs/promises';

/** Where the kernel's memory knobs are; a test gives files in its temporary directory, never the machine's own. */
export interface MemoryKnobs {
  dropCaches: string;
  compactMemory: string;
  meminfo: string;
}

export const SYSTEM_MEMORY_KNOBS: MemoryKnobs = {
  dropCaches: '/proc/sys/vm/drop_caches',
  compactMemory: '/proc/sys/vm/compact_memory',
  meminfo: '/proc/meminfo',
};

/**
 * Drops the clean page cache and the reclaimable slab (dentries, inodes:
 * drop_caches "3") and compacts memory, so that the freed pages are whole
 * free blocks that the balloon's free page reporting hands back to the host
 * and a memory snapshot leaves out. Dirty pages are not dropped: the caller
 * syncs first. Returns how many bytes of cache and slab went (MemInfo's
 * Cached + Buffers + SReclaimable, before less after; never below 0).
 * Compaction is best effort: a kernel built without it has no compact_memory.
 */
export async function dropCaches(knobs: MemoryKnobs): Promise<number> {
  const before = await reclaimableBytes(knobs.meminfo);
  await writeFile(knobs.dropCaches, '3');
  try {
    await writeFile(knobs.compactMemory, '1');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  return Math.max(0, before - (await reclaimableBytes(knobs.meminfo)));
}

async function reclaimableBytes(meminfo: string): Promise<number> {
  const text = await readFile(meminfo, 'utf8');
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(text)?.[1] ?? 0);
  return (kib('Cached') + kib('Buffers') + kib('SReclaimable')) * 1024;
}
