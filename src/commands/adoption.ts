import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { CgroupMode } from '../cgroups/detect.js';
import type { Logger } from '../logger.js';
import { READY_TIMEOUT_MS } from './holder-process.js';
import { readHolderPids, readMeta, type CommandMeta } from './meta.js';
import type { StateDir } from './state-dir.js';
import { TrackedProcess } from './tracked-process.js';

/**
 * A record without a pid file is a start a previous envd did not see
 * through: its holder may still come up (the spawner starts what it was
 * sent) and write one. It is waited for this long after the record was
 * written, a little more than envd gives a holder to say `ready`, before the
 * record is taken for a start that never happened.
 */
export const UNSTARTED_RECORD_WAIT_MS = READY_TIMEOUT_MS + 2_000;
const UNSTARTED_RECORD_POLL_MS = 100;

/** What re-adoption needs of the registry. */
export interface Adopter {
  state: StateDir;
  log: Logger;
  cgroupMode: CgroupMode;
  /** Connects to a re-adopted command's holder and follows it (ProcessRegistry.follow). */
  follow(id: string, dir: string, meta: CommandMeta): Promise<TrackedProcess>;
  track(proc: TrackedProcess): void;
  /** Shutting down or handed over: nothing more is adopted. */
  stopped(): boolean;
}

/**
 * Finds every command a previous envd left in the state directory: running
 * ones through their holder's socket, finished ones through the status the
 * holder wrote. Records nobody can use are removed, and so is spooled
 * output that belongs to no command.
 */
export async function adoptCommands(adopter: Adopter): Promise<void> {
  const { state, log, cgroupMode } = adopter;
  const found: TrackedProcess[] = [];
  const later: { id: string; meta?: CommandMeta }[] = [];
  const ids = await state.listCommandIds();
  await Promise.all(
    ids.map(async (id) => {
      const record = await adoptRecord(adopter, id).catch((error: unknown) => ({ unreadable: error }));
      if (record instanceof TrackedProcess) found.push(record);
      else if ('unstarted' in record) later.push({ id, meta: record.unstarted });
      else if ('unreadable' in record) later.push({ id });
    }),
  );
  found.sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime());
  // A record not read yet keeps its slot unknown: the slot it names may be handed out meanwhile (only the budgets' count suffers).
  state.claimSlots([...found.map((proc) => proc.meta.slot), ...later.flatMap((entry) => (entry.meta ? [entry.meta.slot] : []))]);
  for (const proc of found) adopter.track(proc);
  for (const entry of later) void adoptLater(adopter, entry.id);
  const swept = await state.sweepSpool(new Set([...found.map((proc) => proc.id), ...later.map((entry) => entry.id)]));
  // Cgroups whose command has no record left: a crashed envd's, or removals that ran out of tries.
  if (cgroupMode.mode === 'cgroup') {
    try {
      const sweptCgroups = cgroupMode.cgroups.sweep(new Set(await state.listCommandIds()));
      if (sweptCgroups > 0) log.info({ sweptCgroups }, 'removed the cgroups of commands no record owns');
    } catch (error) {
      log.warn({ err: error }, 'could not sweep the cgroups of commands no record owns: serving on'); // a leak, never a reason not to start
    }
  }
  if (found.length > 0 || swept > 0 || later.length > 0) {
    log.info(
      { adopted: found.length, running: found.filter((proc) => proc.running).length, later: later.length, sweptSpoolFiles: swept },
      're-adopted the commands of a previous envd',
    );
  }
}

/**
 * One record of a previous envd: followed, left alone (a newer envd's),
 * removed (torn before its holder could be asked for), or to be looked at
 * again: no pid file yet (a start under way), or a read that failed (EMFILE).
 * Throws when the record cannot be read.
 */
async function adoptRecord(adopter: Adopter, id: string): Promise<TrackedProcess | { newer: true } | { removed: true } | { unstarted: CommandMeta }> {
  const dir = adopter.state.commandDir(id);
  const meta = readMeta(dir);
  // Written by a newer envd: not ours to judge.
  if (meta === 'newer') return { newer: true };
  if (!meta) {
    // Torn before its holder could be asked for (written in place, see createMeta): nothing runs for it.
    await adopter.state.removeCommand(id);
    return { removed: true };
  }
  if (!readHolderPids(dir)) return { unstarted: meta };
  return adopter.follow(id, dir, meta);
}

/**
 * A record whose holder had not written its pid file when the previous envd
 * stopped (the holder may still be coming up), or one that could not be read.
 * It is looked at again with back-off until it can be followed. A start that
 * never happened (no pid file long after the record was written) is
 * removed and its slot freed; a holder that comes up later than that finds
 * its directory gone, cannot write its pid file, and kills its command.
 */
async function adoptLater(adopter: Adopter, id: string): Promise<void> {
  const { state, log } = adopter;
  const dir = state.commandDir(id);
  for (let delay = UNSTARTED_RECORD_POLL_MS; !adopter.stopped(); delay = Math.min(delay * 2, UNSTARTED_RECORD_POLL_MS * 20)) {
    await new Promise((resolve) => setTimeout(resolve, delay));
    if (adopter.stopped()) return;
    let record;
    try {
      record = await adoptRecord(adopter, id);
    } catch (error) {
      log.warn({ err: error, id }, 'cannot read the record of a command yet: retrying');
      continue;
    }
    if (record instanceof TrackedProcess) {
      if (adopter.stopped()) return record.detach();
      state.claimSlot(record.meta.slot);
      adopter.track(record);
      log.info({ pid: record.pid, running: record.running }, 're-adopted a command later');
      return;
    }
    if (!('unstarted' in record)) return;
    const written = statSync(join(dir, 'meta.json'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
    if (Date.now() > written + UNSTARTED_RECORD_WAIT_MS) {
      log.warn({ id, cmd: record.unstarted.cmd }, 'a command whose start a previous envd did not see through never came up: removing its record');
      await state.removeCommand(id);
      state.releaseSlot(record.unstarted.slot);
      return;
    }
  }
}
