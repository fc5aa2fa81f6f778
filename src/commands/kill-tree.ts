import { closeSync, existsSync, openSync, readdirSync, readSync } from 'node:fs';

interface ProcStat {
  pid: number;
  ppid: number;
  pgid: number;
  sid: number;
}

/** Rescans after SIGSTOP until no new member appears; a bound so a pathological fork storm cannot hold the loop. */
const MAX_SCAN_ROUNDS = 50;

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
  if (leaderReaped && existsSync(`/proc/${root}`)) return [];
  const stopped = new Set<number>();
  for (let round = 0; round < MAX_SCAN_ROUNDS; round++) {
    const fresh = findTree(root, leaderReaped).filter((pid) => !stopped.has(pid));
    if (fresh.length === 0) break;
    for (const pid of fresh) {
      stopped.add(pid);
      sendSignal(pid, 'SIGSTOP');
    }
  }
  for (const pid of stopped) sendSignal(pid, 'SIGKILL');
  return [...stopped];
}

function findTree(root: number, leaderReaped: boolean): number[] {
  const all = readProcessTable();
  const members = new Set<number>();
  for (const proc of all) {
    if (proc.pgid === root || proc.sid === root || (!leaderReaped && proc.pid === root)) members.add(proc.pid);
  }
  const children = new Map<number, number[]>();
  for (const proc of all) {
    const siblings = children.get(proc.ppid);
    if (siblings) siblings.push(proc.pid);
    else children.set(proc.ppid, [proc.pid]);
  }
  const queue = [...members];
  while (queue.length > 0) {
    for (const child of children.get(queue.pop()!) ?? []) {
      if (members.has(child)) continue;
      members.add(child);
      queue.push(child);
    }
  }
  // Never envd itself, nor init, whatever the table said.
  members.delete(process.pid);
  members.delete(1);
  return [...members];
}

/**
 * One buffer for every /proc/<pid>/stat read (a stat line is well under 1 KiB):
 * readFileSync sizes a file by fstat, which says 0 for /proc files, and then
 * reads through a fresh 64 KiB buffer per file, so one scan of a busy
 * sandbox's 2,000 processes allocated 128 MB, and a storm of kills left envd's
 * heap 50-80 MiB larger for good.
 */
const statBuffer = Buffer.allocUnsafeSlow(4096);

function readStatLine(pid: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}/stat`, 'r');
  } catch {
    return undefined; // exited while we looked
  }
  try {
    const length = readSync(fd, statBuffer, 0, statBuffer.length, 0);
    return statBuffer.toString('latin1', 0, length);
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

function readProcessTable(): ProcStat[] {
  const table: ProcStat[] = [];
  for (const entry of readdirSync('/proc')) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue;
    const stat = readStatLine(entry);
    if (stat === undefined) continue;
    // The command name may itself contain ") ", so fields are read after the last one:
    // state ppid pgrp session, parsed in place (a split would make ~50 strings per process).
    let at = stat.lastIndexOf(')') + 4;
    const field = () => {
      let value = 0;
      for (let code = stat.charCodeAt(at); code >= 48 && code <= 57; code = stat.charCodeAt(++at)) value = value * 10 + code - 48;
      at++;
      return value;
    };
    const ppid = field();
    const pgid = field();
    const sid = field();
    table.push({ pid: Number(entry), ppid, pgid, sid });
  }
  return table;
}

/** Sends a signal to a process group; false when the group is gone. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  return sendSignal(-pgid, signal);
}

function sendSignal(target: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(target, signal);
    return true;
  } catch {
    // ESRCH: already gone; EPERM: a setuid program we may not touch.
    return false;
  }
}
