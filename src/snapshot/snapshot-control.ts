import type { FastifyBaseLogger } from 'fastify';
import type { CgroupMode } from '../cgroups/detect.js';
import { conflict } from '../errors.js';
import { freezeTargets, ownCgroup, setFrozen, waitFrozen, type FreezeMode } from './cgroup-freezer.js';
import type { BlockMount } from './filesystems.js';
import type { HolderJob } from './holder-jobs.js';
import { dropCaches, type MemoryKnobs } from './memory.js';

export const DEFAULT_MAX_WAIT_MS = 2_000;
export const DEFAULT_THAW_AFTER_MS = 30_000;

export interface PrepareOptions {
  freeze?: FreezeMode;
  fsfreeze?: boolean;
  drop_caches?: boolean;
  max_wait_ms?: number;
  thaw_after_ms?: number;
}

export interface PrepareResult {
  frozen: number;
  unconfirmed: number;
  synced_ms: number;
  dropped_bytes: number;
  fs_frozen: string[];
  envd_rss_before: number;
  envd_rss_after: number;
  took_ms: number;
}

export interface ThawResult {
  /** Cgroups thawed. */
  thawed: number;
  /** Mount points thawed. */
  fs_thawed: string[];
  /** Why: the request, /init, or the auto-thaw timer. */
  by: ThawReason;
}

export type ThawReason = 'request' | 'init' | 'timer' | 'failed-prepare' | 'close';

/** What prepare touches on the machine; injected so that tests use temp dirs and a loop-mounted image, never this machine's own. */
export interface SnapshotMachine {
  cgroups: CgroupMode;
  job: HolderJob;
  memory: MemoryKnobs;
  /** The filesystems `fsfreeze` freezes. */
  mounts: () => Promise<BlockMount[]>;
  /** /proc/self/cgroup's text. */
  selfCgroup: () => string;
  /** A full, memory-reducing collection of envd's heap, then malloc_trim. */
  trimEnvd: () => void;
}

/**
 * The snapshot state machine: thawed → prepared (cgroups and filesystems
 * frozen, an auto-thaw timer armed) → thawed. prepare and thaw run one at a
 * time, in arrival order, so a thaw that arrives during a prepare thaws what
 * that prepare froze. Thawing when nothing is frozen is a no-op that says so.
 * A prepare that fails half-way thaws what it froze and answers the error.
 */
export class SnapshotControl {
  #frozenCgroups = new Set<string>();
  /** In freeze order; thawed in reverse. */
  #frozenMounts: BlockMount[] = [];
  #timer: NodeJS.Timeout | undefined;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly machine: SnapshotMachine,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Whether prepare holds cgroups frozen now (a command started meanwhile would be born frozen). */
  get commandsFrozen(): boolean {
    return this.#frozenCgroups.size > 0;
  }

  /** Whether anything is frozen now. */
  get prepared(): boolean {
    return this.#frozenCgroups.size > 0 || this.#frozenMounts.length > 0;
  }

  /** Throws the 409 of a machine that cannot freeze, before anything is queued. */
  prepare(options: PrepareOptions): Promise<PrepareResult> {
    const mode = options.freeze ?? 'commands';
    const { cgroups } = this.machine;
    if (mode !== 'none' && cgroups.mode !== 'cgroup') {
      return Promise.reject(conflict(`freeze: ${JSON.stringify(mode)} needs cgroup v2 (${cgroups.why}); send "none"`));
    }
    return this.#serially(async () => {
      try {
        return await this.#prepare(mode, options);
      } catch (error) {
        await this.#thaw('failed-prepare');
        throw error;
      }
    });
  }

  /** Thaws whatever prepare froze: filesystems first (their writers are what the cgroups hold), then the cgroups. */
  thaw(by: ThawReason): Promise<ThawResult> {
    return this.#serially(() => this.#thaw(by));
  }

  /**
   * Only the filesystems, for /init: its writes (/etc/hostname, the trust
   * store) must not wait on a frozen disk, and its cgroups thaw only once
   * the clock is set.
   */
  thawFilesystems(): Promise<string[]> {
    return this.#serially(() => this.#thawFilesystems());
  }

  /** envd is closing (a restart's SIGHUP leaves commands running for the next envd, which knows nothing of a freeze): thaw. */
  async close(): Promise<void> {
    await this.thaw('close');
  }

  async #prepare(mode: FreezeMode, options: PrepareOptions): Promise<PrepareResult> {
    const started = performance.now();
    const rssBefore = process.memoryUsage.rss();
    let frozen = { frozen: 0, unconfirmed: 0 };
    const { cgroups } = this.machine;
    if (mode !== 'none' && cgroups.mode === 'cgroup') {
      const targets = freezeTargets(mode, cgroups.cgroups.root, cgroups.cgroups.commands, ownCgroup(this.machine.selfCgroup()));
      for (const cgroup of await setFrozen(targets, true)) this.#frozenCgroups.add(cgroup);
      frozen = await waitFrozen(targets, options.max_wait_ms ?? DEFAULT_MAX_WAIT_MS);
    }
    const syncStarted = performance.now();
    await this.machine.job(['--sync']);
    const syncedMs = performance.now() - syncStarted;
    const droppedBytes = options.drop_caches === true ? await dropCaches(this.machine.memory) : 0;
    this.machine.trimEnvd();
    const rssAfter = process.memoryUsage.rss();
    const fsFrozen = options.fsfreeze === true ? await this.#freezeFilesystems() : [];
    const result: PrepareResult = {
      ...frozen,
      synced_ms: round(syncedMs),
      dropped_bytes: droppedBytes,
      fs_frozen: fsFrozen,
      envd_rss_before: rssBefore,
      envd_rss_after: rssAfter,
      took_ms: round(performance.now() - started),
    };
    // Counted from the answer, so that a slow prepare does not eat the pause's time. Until then every
    // step is bounded (max_wait_ms, the holder jobs' timeout), and a failed one thaws everything.
    this.#armTimer(options.thaw_after_ms ?? DEFAULT_THAW_AFTER_MS);
    this.log.info({ mode, ...result }, 'prepared for a snapshot');
    return result;
  }

  /** FIFREEZE on each writable block filesystem not frozen already by an earlier prepare. Last: nothing after it writes. */
  async #freezeFilesystems(): Promise<string[]> {
    for (const mount of await this.machine.mounts()) {
      if (this.#frozenMounts.some((held) => held.device === mount.device)) continue;
      await this.machine.job(['--fsfreeze', mount.path]);
      this.#frozenMounts.push(mount);
    }
    return this.#frozenMounts.map((mount) => mount.path);
  }

  async #thaw(by: ThawReason): Promise<ThawResult> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const fsThawed = await this.#thawFilesystems();
    const thawed = await setFrozen([...this.#frozenCgroups], false);
    this.#frozenCgroups.clear();
    const result: ThawResult = { thawed: thawed.length, fs_thawed: fsThawed, by };
    if (thawed.length > 0 || fsThawed.length > 0) this.log.info(result, 'thawed');
    return result;
  }

  async #thawFilesystems(): Promise<string[]> {
    const thawed: string[] = [];
    while (this.#frozenMounts.length > 0) {
      const mount = this.#frozenMounts.pop()!;
      try {
        await this.machine.job(['--fsthaw', mount.path]);
        thawed.push(mount.path);
      } catch (error) {
        // EINVAL: someone else (fsfreeze -u) thawed it already. Anything else is logged; the rest still thaw.
        if (!/EINVAL/.test((error as Error).message)) this.log.warn({ err: error, mount: mount.path }, 'cannot thaw a filesystem');
      }
    }
    return thawed;
  }

  /**
   * libuv's timers count CLOCK_MONOTONIC, which stands still while the VM is
   * paused: the wait is the guest's running time, so a snapshot taken within
   * it does not thaw at once on every restore.
   */
  #armTimer(ms: number): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.thaw('timer').catch((error: unknown) => this.log.error({ err: error }, 'the auto-thaw failed'));
    }, ms);
    this.#timer.unref();
  }

  #serially<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(work, work);
    this.#queue = run.catch(() => {});
    return run;
  }
}

const round = (ms: number) => Math.round(ms * 10) / 10;
