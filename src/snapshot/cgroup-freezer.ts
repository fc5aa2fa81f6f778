import { existsSync, readdirSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** What `POST /snapshot/prepare` freezes: every command's cgroup, every cgroup but envd's own, or nothing. */
export type FreezeMode = 'commands' | 'all' | 'none';

/** How often a freeze in progress is read back (cgroup.events' `frozen 1`). */
const FROZEN_POLL_MS = 2;

/**
 * Cgroups that "all" leaves running, as paths below the root: PID 1 (under
 * systemd, freezing it stops the journal's socket and every unit change), and
 * the journal, which reads envd's log: frozen, it would fill envd's log pipe
 * and stop envd at its next line (pino writes synchronously).
 */
export const NEVER_FROZEN: readonly string[] = ['init.scope', 'system.slice/systemd-journald.service'];

/**
 * The cgroups to freeze for `mode`, as absolute paths. "commands" is the
 * commands' parent (envd-commands/, every command and service below it: one
 * write freezes the whole subtree, and a command started meanwhile is born
 * frozen). "all" is every cgroup that neither holds envd nor lies on the way
 * to it: the siblings of each of envd's ancestors, so that envd, its holders
 * (in envd's cgroup) and the kernel threads (the root's) go on.
 * `envdCgroup` is envd's own path below the root ("" for the root itself,
 * where envd runs under envd-init).
 */
export function freezeTargets(mode: FreezeMode, root: string, commands: string, envdCgroup: string): string[] {
  if (mode === 'none') return [];
  if (mode === 'commands') return existsSync(commands) ? [commands] : [];
  const own = envdCgroup.replace(/^\/+|\/+$/g, '');
  const targets: string[] = [];
  const visit = (relative: string) => {
    for (const entry of readdirSync(join(root, relative), { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const path = relative === '' ? entry.name : `${relative}/${entry.name}`;
      if (path === own || NEVER_FROZEN.includes(path)) continue;
      if (own.startsWith(`${path}/`)) visit(path);
      else targets.push(join(root, path));
    }
  };
  visit('');
  return targets;
}

/** Envd's own cgroup v2 path from /proc/self/cgroup's text ("" for the root). */
export function ownCgroup(selfCgroup: string): string {
  return /^0::(.*)$/m.exec(selfCgroup)?.[1]?.trim().replace(/^\/+/, '') ?? '';
}

/** Writes cgroup.freeze of each; returns the ones that took it (a command that ended meanwhile took its cgroup with it). */
export async function setFrozen(cgroups: readonly string[], frozen: boolean): Promise<string[]> {
  const done: string[] = [];
  for (const cgroup of cgroups) {
    try {
      await writeFile(join(cgroup, 'cgroup.freeze'), frozen ? '1' : '0');
      done.push(cgroup);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return done;
}

/**
 * Reads each cgroup's cgroup.events until it says `frozen 1` (every process
 * in it stopped; the kernel sets it once the last one has) or `maxWaitMs` has
 * passed. A cgroup gone meanwhile counts as confirmed: nothing runs in it.
 */
export async function waitFrozen(cgroups: readonly string[], maxWaitMs: number): Promise<{ frozen: number; unconfirmed: number }> {
  const deadline = performance.now() + maxWaitMs;
  let waiting = [...cgroups];
  for (;;) {
    const still: string[] = [];
    for (const cgroup of waiting) if (!(await readsFrozen(cgroup))) still.push(cgroup);
    waiting = still;
    if (waiting.length === 0 || performance.now() >= deadline) break;
    await sleep(FROZEN_POLL_MS);
  }
  return { frozen: cgroups.length - waiting.length, unconfirmed: waiting.length };
}

async function readsFrozen(cgroup: string): Promise<boolean> {
  try {
    return /^frozen 1$/m.test(await readFile(join(cgroup, 'cgroup.events'), 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw error;
  }
}
