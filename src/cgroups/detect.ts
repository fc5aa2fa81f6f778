import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CommandCgroups } from './command-cgroups.js';

/** Which way envd ends and limits commands: a cgroup per command, or the /proc walk of before. */
export type CgroupMode = { mode: 'cgroup'; cgroups: CommandCgroups } | { mode: 'proc'; why: string };

export interface CgroupLocation {
  /** Where cgroup2 is mounted. */
  root: string;
  /** /proc/self/cgroup's text. */
  selfCgroup: string;
  /** MemTotal in bytes, for the commands' cap. */
  memTotal: number;
}

/** The real machine's. */
export function systemLocation(): CgroupLocation {
  const meminfo = readFileSync('/proc/meminfo', 'utf8');
  return {
    root: '/sys/fs/cgroup',
    selfCgroup: readFileSync('/proc/self/cgroup', 'utf8'),
    memTotal: Number(/^MemTotal:\s+(\d+) kB$/m.exec(meminfo)?.[1] ?? 0) * 1024,
  };
}

/**
 * Sets up the commands' subtree where cgroup v2 is the unified hierarchy at
 * `root` and envd may write it (root in a VM: under systemd or envd-init);
 * otherwise says why not, and envd keeps the /proc walk. Never throws: no
 * cgroup is no reason not to serve.
 */
export function openCgroups(where: CgroupLocation, reserveMemory: number | undefined): CgroupMode {
  if (!existsSync(join(where.root, 'cgroup.controllers'))) {
    return { mode: 'proc', why: `cgroup v2 is not the unified hierarchy at ${where.root} (a cgroup v1 or hybrid host)` };
  }
  if (!/^0::\//m.test(where.selfCgroup)) return { mode: 'proc', why: 'envd is in no cgroup v2 (/proc/self/cgroup has no 0:: line)' };
  const commandsMax = reserveMemory !== undefined && where.memTotal > reserveMemory ? where.memTotal - reserveMemory : undefined;
  try {
    return { mode: 'cgroup', cgroups: CommandCgroups.setUp(where.root, commandsMax) };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    return { mode: 'proc', why: `the cgroup v2 hierarchy at ${where.root} is not writable by envd (${code}): not root, or a container without a delegated cgroup namespace` };
  }
}
