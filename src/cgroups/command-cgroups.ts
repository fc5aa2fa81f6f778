import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Limits } from './limits.js';

/** cpu.max's period: 100 ms, the kernel's default. */
const CPU_PERIOD_US = 100_000;
const CONTROLLERS = ['memory', 'pids', 'cpu'];

/**
 * The waits between tries to remove a command cgroup that still held
 * processes (a straggler its shell left): about 4 minutes in all. What is
 * still there after that goes at the next start-up's sweep.
 */
export const REMOVE_RETRY_DELAYS_MS: readonly number[] = [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000];

/** A command cgroup's name: the command's id (state-dir.ts). Nothing else in envd-commands/ is envd's to remove. */
const COMMAND_ID = /^[0-9a-f]{16}$/;

/** What a command's cgroup says about how it ended (read before the cgroup is removed). */
export interface CgroupEnd {
  oomKilled: boolean;
  pidsExhausted: boolean;
}

export interface CgroupStats {
  cpu_usec: number;
  memory_bytes: number;
  memory_peak_bytes: number | null;
  pids: number;
}

/**
 * The commands' cgroup v2 subtree, as set up by `CommandCgroups.setUp`:
 *
 *   <root>/                       cgroup2's mount: memory, pids and cpu enabled for its children
 *   <root>/envd-commands/         every command, at most the VM's memory less --reserve-memory
 *   <root>/envd-commands/<id>/    one command: its limits, cgroup.kill for its whole tree
 *
 * envd itself stays where it was started (its systemd unit's cgroup, or the
 * root under envd-init), so no command can take its memory. Not below envd's
 * own unit: systemd 252 (Debian 12) puts a restarted unit's new process into
 * the unit's cgroup, which fails (219/CGROUP) once that cgroup hands
 * controllers to children (DelegateSubgroup= came in 254).
 *
 * `root` is a parameter, so that the tests lay out a directory like cgroupfs
 * and check what envd writes there.
 */
export class CommandCgroups {
  /** The removals waiting for their next try, by command id. */
  private readonly retries = new Map<string, NodeJS.Timeout>();

  private constructor(
    /** Where cgroup2 is mounted. */
    readonly root: string,
    /** REMOVE_RETRY_DELAYS_MS; shorter in the tests. */
    private readonly retryDelaysMs: readonly number[],
  ) {}

  get commands(): string {
    return join(this.root, 'envd-commands');
  }

  /**
   * Enables memory, pids and cpu for the root's children and for the commands'
   * parent, and caps all commands together at `commandsMemoryMax` bytes when
   * given. Throws when the hierarchy is not ours to write (not root, a container
   * without cgroup namespace delegation).
   */
  static setUp(root: string, commandsMemoryMax: number | undefined, retryDelaysMs = REMOVE_RETRY_DELAYS_MS): CommandCgroups {
    const cgroups = new CommandCgroups(root, retryDelaysMs);
    const available = new Set(readFileSync(join(root, 'cgroup.controllers'), 'utf8').trim().split(/\s+/));
    const enable = CONTROLLERS.filter((name) => available.has(name)).map((name) => `+${name}`).join(' ');
    writeControl(join(root, 'cgroup.subtree_control'), enable);
    mkdirSync(cgroups.commands, { recursive: true });
    writeControl(join(cgroups.commands, 'cgroup.subtree_control'), enable);
    if (commandsMemoryMax !== undefined) {
      writeControl(join(cgroups.commands, 'memory.max'), String(commandsMemoryMax));
      writeControl(join(cgroups.commands, 'memory.swap.max'), '0');
    }
    return cgroups;
  }

  pathOf(id: string): string {
    return join(this.commands, id);
  }

  /** A command's cgroup with its limits, before the command starts (its holder's child joins it). */
  create(id: string, limits: Limits | undefined): string {
    const path = this.pathOf(id);
    mkdirSync(path);
    try {
      if (limits?.memory_bytes !== undefined) {
        writeControl(join(path, 'memory.max'), String(limits.memory_bytes));
        writeControl(join(path, 'memory.swap.max'), '0');
      }
      if (limits?.pids !== undefined) writeControl(join(path, 'pids.max'), String(limits.pids));
      if (limits?.cpu !== undefined) writeControl(join(path, 'cpu.max'), `${Math.max(1000, Math.round(limits.cpu * CPU_PERIOD_US))} ${CPU_PERIOD_US}`);
    } catch (error) {
      this.remove(id);
      throw error;
    }
    return path;
  }

  /** SIGKILL to every process in the command's cgroup at once: setsid escapees and fork loops included. */
  kill(id: string): boolean {
    try {
      writeControl(join(this.pathOf(id), 'cgroup.kill'), '1');
      return true;
    } catch {
      return false;
    }
  }

  /** Whether any process is left in the command's cgroup. */
  populated(id: string): boolean {
    return /^populated 1$/m.test(readOr(join(this.pathOf(id), 'cgroup.events'), ''));
  }

  end(id: string): CgroupEnd {
    const path = this.pathOf(id);
    return {
      oomKilled: counter(readOr(join(path, 'memory.events'), ''), 'oom_kill') > 0,
      pidsExhausted: counter(readOr(join(path, 'pids.events'), ''), 'max') > 0,
    };
  }

  stats(id: string): CgroupStats {
    const path = this.pathOf(id);
    const peak = readOr(join(path, 'memory.peak'), '');
    return {
      cpu_usec: counter(readOr(join(path, 'cpu.stat'), ''), 'usage_usec'),
      memory_bytes: Number(readOr(join(path, 'memory.current'), '0')),
      // memory.peak is kernel 5.19+.
      memory_peak_bytes: peak === '' ? null : Number(peak),
      pids: Number(readOr(join(path, 'pids.current'), '0')),
    };
  }

  /** All commands together (the commands/ parent). */
  total(): Omit<CgroupStats, 'memory_peak_bytes'> {
    const { cpu_usec, memory_bytes, pids } = this.statsOf(this.commands);
    return { cpu_usec, memory_bytes, pids };
  }

  private statsOf(path: string): CgroupStats {
    return {
      cpu_usec: counter(readOr(join(path, 'cpu.stat'), ''), 'usage_usec'),
      memory_bytes: Number(readOr(join(path, 'memory.current'), '0')),
      memory_peak_bytes: null,
      pids: Number(readOr(join(path, 'pids.current'), '0')),
    };
  }

  exists(id: string): boolean {
    return existsSync(this.pathOf(id));
  }

  /**
   * Removes a command's cgroup; false while processes are left in it. Then it
   * is tried again REMOVE_RETRY_DELAYS_MS later (bounded), so a straggler that
   * ends after its command was forgotten does not leak the directory.
   */
  remove(id: string): boolean {
    if (this.removeNow(id)) {
      clearTimeout(this.retries.get(id));
      this.retries.delete(id);
      return true;
    }
    if (!this.retries.has(id)) this.retryRemoval(id, 0);
    return false;
  }

  /** How many removals wait for another try. */
  get pendingRemovals(): number {
    return this.retries.size;
  }

  /**
   * At start-up, after re-adoption: removes the command cgroups that no
   * command record of `keep` owns (a crashed envd's, or removals that ran out
   * of tries). Only envd-commands/ children named like a command id: nothing
   * else there or elsewhere in the hierarchy is envd's. Returns how many went;
   * busy ones are retried like any removal.
   */
  sweep(keep: ReadonlySet<string>): number {
    let removed = 0;
    for (const entry of readdirSync(this.commands, { withFileTypes: true })) {
      if (!entry.isDirectory() || !COMMAND_ID.test(entry.name) || keep.has(entry.name)) continue;
      if (this.remove(entry.name)) removed++;
    }
    return removed;
  }

  private retryRemoval(id: string, attempt: number): void {
    const delay = this.retryDelaysMs[attempt];
    if (delay === undefined) {
      this.retries.delete(id);
      return;
    }
    const timer = setTimeout(() => {
      if (this.removeNow(id)) this.retries.delete(id);
      else this.retryRemoval(id, attempt + 1);
    }, delay);
    timer.unref(); // never what keeps envd's process alive
    this.retries.set(id, timer);
  }

  /** One try: true once the cgroup is gone. */
  private removeNow(id: string): boolean {
    const path = this.pathOf(id);
    try {
      rmdirSync(path);
      return true;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return true;
      // A directory laid out by a test holds plain files (cgroupfs's own vanish with rmdir).
      if (code === 'ENOTEMPTY' && !this.populated(id)) {
        rmSync(path, { recursive: true, force: true });
        return true;
      }
      return false;
    }
  }
}

/** One write of a control file, as the kernel wants it: the whole value in one write(2). */
function writeControl(path: string, value: string): void {
  const fd = openSync(path, existsSync(path) ? 'r+' : 'w');
  try {
    writeSync(fd, value);
  } finally {
    closeSync(fd);
  }
}

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return fallback;
  }
}

/** `key N` from a flat-keyed cgroup file (memory.events, cpu.stat); 0 when absent. */
function counter(text: string, key: string): number {
  const match = new RegExp(`^${key} (\\d+)$`, 'm').exec(text);
  return match ? Number(match[1]) : 0;
}
