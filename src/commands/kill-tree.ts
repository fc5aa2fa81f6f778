import { closeSync, existsSync, openSync, readdirSync, readSync } from 'node:fs';

/** Rescans after SIGSTOP until no new member appears; a bound so a pathological fork storm cannot hold the loop. */
const MAX_SCAN_ROUNDS = 50;

/** A command's tree to kill: its shell's pid, and whether that shell is reaped already (see killProcessTrees). */
export interface TreeRoot {
  root: number;
  leaderReaped: boolean;
}

/**
 * SIGKILLs everything a command started: its process group, its session, and
 * every descendant of any of those (which catches children that called
 * setsid or setpgid while their parent was still in the tree).
 *
 * Members are SIGSTOPped as they are found and the tree is rescanned until it
 * stops growing, so nothing can fork its way out between scan and kill.
 *
 * `leaderReaped`: the command's shell has exited and been reaped, so its pid
 * number may belong to someone else by now. Then only the group and session
 * are signalled, and only while no live process holds the number itself
 * (the kernel does not reuse a pid number while a group or session still
 * carries it, so such members can only be ours).
 *
 * Returns the pids that were signalled.
 */
export function killProcessTree(root: number, { leaderReaped }: { leaderReaped: boolean }): number[] {
  return killProcessTrees([{ root, leaderReaped }]);
}

/**
 * The same for many commands at once, with one scan of /proc per round for
 * all of them: shutdown kills every command, and a scan per command made
 * that quadratic (1,000 commands: ~2,000 scans of 2,000 processes, most of a
 * minute in which envd could not exit).
 */
export function killProcessTrees(trees: TreeRoot[]): number[] {
  const live = trees.filter(({ root, leaderReaped }) => !(leaderReaped && existsSync(`/proc/${root}`)));
  if (live.length === 0) return [];
  const stopped = new Set<number>();
  for (let round = 0; round < MAX_SCAN_ROUNDS; round++) {
    const fresh = findTrees(live).filter((pid) => !stopped.has(pid));
    if (fresh.length === 0) break;
    for (const pid of fresh) {
      stopped.add(pid);
      signalProcess(pid, 'SIGSTOP');
    }
  }
  for (const pid of stopped) signalProcess(pid, 'SIGKILL');
  return [...stopped];
}

function findTrees(trees: TreeRoot[]): number[] {
  const roots = new Set(trees.map((tree) => tree.root));
  const leaders = new Set(trees.filter((tree) => !tree.leaderReaped).map((tree) => tree.root));
  const count = readProcessTable();
  const members = new Set<number>();
  for (let i = 0; i < count; i++) {
    const pid = table[i * 4]!;
    if (roots.has(table[i * 4 + 2]!) || roots.has(table[i * 4 + 3]!) || leaders.has(pid)) members.add(pid);
  }
  // Descendants: passes over the table until no process with a member parent is left out
  // (a tree is a few levels deep; no per-scan map of children to allocate).
  for (let grew = true; grew; ) {
    grew = false;
    for (let i = 0; i < count; i++) {
      const pid = table[i * 4]!;
      if (!members.has(pid) && members.has(table[i * 4 + 1]!)) {
        members.add(pid);
        grew = true;
      }
    }
  }
  // Never envd itself, nor init, whatever the table said.
  members.delete(process.pid);
  members.delete(1);
  return [...members];
}

/**
 * The process table of the last scan, reused: pid, ppid, pgid, sid per process.
 * A storm of kills (1,000 DELETEs in a sandbox of 2,000 processes) scans /proc
 * thousands of times; allocating per process per scan (a string per stat line,
 * an object per process) left envd's heap 30-50 MiB larger for good.
 */
let table = new Int32Array(4 * 4096);

/** One buffer for every /proc/<pid>/stat read: a stat line is well under 1 KiB. */
const statBuffer = Buffer.allocUnsafeSlow(4096);

/** Fills `table`; returns how many processes it holds. */
function readProcessTable(): number {
  let count = 0;
  for (const entry of readdirSync('/proc')) {
    const first = entry.charCodeAt(0);
    if (first < 48 || first > 57) continue;
    const length = readStat(entry);
    if (length <= 0) continue; // exited while we looked
    // The command name may itself contain ") ", so fields are read after the last one:
    // ") state ppid pgrp session ...".
    let at = statBuffer.lastIndexOf(0x29, length - 1) + 4;
    const field = () => {
      let value = 0;
      for (let byte = statBuffer[at]!; byte >= 48 && byte <= 57; byte = statBuffer[++at]!) value = value * 10 + byte - 48;
      at++;
      return value;
    };
    if (count * 4 + 4 > table.length) {
      const grown = new Int32Array(table.length * 2);
      grown.set(table);
      table = grown;
    }
    table[count * 4] = Number(entry);
    table[count * 4 + 1] = field();
    table[count * 4 + 2] = field();
    table[count * 4 + 3] = field();
    count++;
  }
  return count;
}

/** Reads /proc/<pid>/stat into statBuffer; the length read, or 0 when the process is gone. */
function readStat(pid: string): number {
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}/stat`, 'r');
  } catch {
    return 0;
  }
  try {
    return readSync(fd, statBuffer, 0, statBuffer.length, 0);
  } catch {
    return 0;
  } finally {
    closeSync(fd);
  }
}

/** Sends a signal to a process group; false when the group is gone. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  return signalProcess(-pgid, signal);
}

/** Sends a signal to a process (or, negative, a group); false when it is gone. */
export function signalProcess(target: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(target, signal);
    return true;
  } catch {
    // ESRCH: already gone; EPERM: a setuid program we may not touch.
    return false;
  }
}
