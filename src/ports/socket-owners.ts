import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * Which process holds each socket inode: /proc/PID/fd is read, and each link
 * `socket:[INODE]` among them. This is the expensive part of a port's record
 * (thousands of readlinks on a busy guest), so it runs only for sockets seen
 * for the first time, once for all of them together, newest processes first
 * (a new listener is most often a new process's), and stops once every inode
 * is found.
 *
 * A socket held by several processes (a server that forks its workers after
 * bind) belongs to the topmost of them: from the holder found, up its parents
 * while they hold it too. A process envd may not read (another pid namespace,
 * hidepid) holds nothing as far as envd can tell.
 */
export function findSocketOwners(inodes: ReadonlySet<number>): Map<number, number> {
  const owners = new Map<number, number>();
  if (inodes.size === 0) return owners;
  const pids = readdirSync('/proc').map(Number).filter(Number.isInteger).sort((a, b) => b - a);
  for (const pid of pids) {
    for (const inode of socketsOf(pid)) if (inodes.has(inode) && !owners.has(inode)) owners.set(inode, pid);
    if (owners.size === inodes.size) break;
  }
  for (const [inode, pid] of owners) owners.set(inode, topmost(pid, inode));
  return owners;
}

/** The socket inodes a process holds (none if it is gone or not ours to read). */
function socketsOf(pid: number): number[] {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  const found: number[] = [];
  for (const fd of fds) {
    try {
      const link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      if (link.startsWith('socket:[')) found.push(Number(link.slice(8, -1)));
    } catch {
      // closed meanwhile
    }
  }
  return found;
}

/** The descriptor number under which a process holds the socket of `inode` (undefined: not, or gone). */
export function socketFdOf(pid: number, inode: number): number | undefined {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return undefined;
  }
  const wanted = `socket:[${inode}]`;
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === wanted) return Number(fd);
    } catch {
      // closed meanwhile
    }
  }
  return undefined;
}

function topmost(pid: number, inode: number): number {
  for (let depth = 0; depth < 64; depth++) {
    const parent = parentOf(pid);
    if (parent === undefined || parent <= 1 || !socketsOf(parent).includes(inode)) return pid;
    pid = parent;
  }
  return pid;
}

/** A process's parent, from /proc/PID/stat (after the command name, which may itself hold spaces and parentheses). */
export function parentOf(pid: number): number | undefined {
  const fields = statFields(pid);
  return fields ? Number(fields[1]) : undefined;
}

/** /proc/PID/stat's fields from the state on: [state, ppid, pgrp, session, ...]. */
export function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** Whether a process is still there (a socket's owner may have exited, leaving it to a child). */
export function isAlive(pid: number): boolean {
  return existsSync(`/proc/${pid}`);
}

/** A process's command line as one string (arguments joined by spaces), its name when it has none (a kernel thread, a zombie). */
export function commandLineOf(pid: number): string | null {
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (cmdline !== '') return cmdline.replace(/\0+$/, '').replaceAll('\0', ' ');
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() || null;
  } catch {
    return null;
  }
}

/**
 * uid → user name from /etc/passwd, read when a name is asked for that it has
 * not seen (new sockets only), so a user added later is found without a cache
 * to invalidate. A uid with no line is shown as its number.
 */
export class UserNames {
  private names = new Map<number, string>();

  nameOf(uid: number): string {
    let name = this.names.get(uid);
    if (name === undefined) {
      this.names = readPasswd();
      name = this.names.get(uid) ?? String(uid);
    }
    return name;
  }
}

function readPasswd(): Map<number, string> {
  const names = new Map<number, string>();
  let text = '';
  try {
    text = readFileSync('/etc/passwd', 'utf8');
  } catch {
    // An image without /etc/passwd: every uid is its number.
  }
  for (const line of text.split('\n')) {
    const fields = line.split(':');
    const uid = Number(fields[2]);
    if (fields[0] && fields.length >= 3 && Number.isInteger(uid) && !names.has(uid)) names.set(uid, fields[0]);
  }
  return names;
}
