import { readFileSync } from 'node:fs';
import { statFields } from './socket-owners.js';

/** How far up the parent chain a process is followed to a command (a tree deeper than this is a fork bomb, not a server). */
const MAX_ANCESTORS = 64;

/** A command's cgroup (src/cgroups/command-cgroups.ts): `/envd-commands/<id>` in /proc/PID/cgroup. */
const COMMAND_CGROUP = /^0::.*\/envd-commands\/([0-9a-f]{16})$/m;

/** What the lookup needs of the command registry: its commands' pids and ids. */
export interface CommandsByPid {
  /** The tracked command with this pid (its shell), if any. */
  has(pid: number): boolean;
  /** The pid of the tracked command whose id (and cgroup name) this is. */
  pidOfId(id: string): number | undefined;
}

/**
 * The tracked command that owns a process, or null. In the order of what is
 * surest and cheapest:
 *  1. the command's cgroup, which holds every process it started however it
 *     daemonised (cgroup mode);
 *  2. the process itself, its session or its process group: every command is
 *     a session leader (the holder's setsid), and so is the root of whatever
 *     it starts unless that starts a session of its own;
 *  3. its ancestors, for a tree that did (stops at a reparented process: a
 *     daemon whose parent is gone belongs to init, not to a command).
 */
export function commandOwnerOf(pid: number, commands: CommandsByPid): number | null {
  try {
    const id = COMMAND_CGROUP.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1];
    const byCgroup = id === undefined ? undefined : commands.pidOfId(id);
    if (byCgroup !== undefined) return byCgroup;
  } catch {
    return null; // gone
  }
  let at = pid;
  for (let depth = 0; depth < MAX_ANCESTORS && at > 1; depth++) {
    if (commands.has(at)) return at;
    const fields = statFields(at);
    if (!fields) return null;
    const [, ppid, pgrp, session] = fields.map(Number);
    if (depth === 0) {
      if (commands.has(session!)) return session!;
      if (commands.has(pgrp!)) return pgrp!;
    }
    at = ppid!;
  }
  return null;
}
