import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { signalProcess } from '../commands/kill-tree.js';

/**
 * The processes of a session's shell that share its process group and
 * session (the holder makes the shell a session leader, so both ids are the
 * shell's pid): the shell, its foreground commands and its `&` jobs. A
 * `setsid` job has left both and is never among them.
 */
interface Member {
  pid: number;
  /** How long ago it started, in ms (10 ms steps: clock ticks). */
  ageMs: number;
  /** Its SigIgn mask. */
  ignored: bigint;
}

const bit = (signal: number) => 1n << BigInt(signal - 1);
const SIGINT_BIT = bit(constants.signals.SIGINT);
const SIGHUP_BIT = bit(constants.signals.SIGHUP);

/** USER_HZ: what /proc/<pid>/stat counts a start time in (100 on every Linux envd runs on). */
const CLOCK_TICKS = 100;

/**
 * Once the shell is reaped its number may be reused, and the holder makes every command's shell a session
 * leader: a stranger could then have our group and session ids. The kernel never hands out a number that a
 * live group or session still carries, so while a process holds the number itself, nothing of ours can
 * carry it (kill-tree.ts reasons the same way).
 */
function members(shellPid: number, shellReaped: boolean): Member[] {
  if (shellReaped && existsSync(`/proc/${shellPid}`)) return [];
  const found: Member[] = [];
  const uptimeMs = Number(readFileSync('/proc/uptime', 'latin1').split(' ')[0]) * 1000;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'latin1');
      // pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses, so read after the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) !== shellPid || Number(fields[3]) !== shellPid) continue;
      const ignored = /^SigIgn:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${name}/status`, 'latin1'))?.[1];
      found.push({ pid: Number(name), ageMs: uptimeMs - (Number(fields[19]) * 1000) / CLOCK_TICKS, ignored: BigInt(`0x${ignored ?? '0'}`) });
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/** SIGINT to the shell's group: its foreground command ends, the shell's trap returns 130, `&` jobs (SIGINT ignored) live on. */
export function interruptForeground(shellPid: number): void {
  for (const member of members(shellPid, false)) signalProcess(member.pid, 'SIGINT');
}

/**
 * SIGKILL to what survived SIGINT: every member but the shell that the command started (in the last `commandAgeMs`) or
 * that does not ignore SIGINT. The `&` jobs of earlier commands (started before, SIGINT ignored) live on.
 */
export function killForeground(shellPid: number, commandAgeMs: number): number {
  const targets = members(shellPid, false).filter((member) => member.pid !== shellPid && (member.ageMs <= commandAgeMs + 20 || (member.ignored & SIGINT_BIT) === 0n));
  for (const member of targets) signalProcess(member.pid, 'SIGKILL');
  return targets.length;
}

/** The session's hangup, as a terminal's: SIGHUP to the shell and its jobs; `nohup` ones ignore it. */
export function hangUp(shellPid: number, shellReaped: boolean): void {
  for (const member of members(shellPid, shellReaped)) signalProcess(member.pid, 'SIGHUP');
}

/** After the hangup: SIGKILL to every member that does not ignore SIGHUP (not `nohup`), the shell included; how many. */
export function killHungUp(shellPid: number, shellReaped: boolean): number {
  const targets = members(shellPid, shellReaped).filter((member) => (member.ignored & SIGHUP_BIT) === 0n);
  for (const member of targets) signalProcess(member.pid, 'SIGKILL');
  return targets.length;
}
