// What the soak reads of a running envd from outside: its memory, its
// descriptors by kind, the processes it is responsible for, and what it keeps
// on disk. Everything comes from /proc and the directories envd was given.
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';

/** Where envd puts one cgroup per command in cgroup mode (absent in proc mode). */
const COMMAND_CGROUPS = '/sys/fs/cgroup/envd-commands';

/** The machine's CPU time so far in ticks: all of it, and all but idle and iowait. */
export function cpuTimes() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  const cpuTotal = fields.reduce((a, b) => a + b, 0);
  return { cpuTotal, cpuBusy: cpuTotal - fields[3] - fields[4] };
}

/** VmRSS and RssAnon of a process, in bytes. */
export function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  return { rss: field('VmRSS'), anon: field('RssAnon') };
}

/**
 * envd's open descriptors counted by kind: socket, pipe, anon_inode:<what>,
 * or file (anything with a path). A leak shows as a kind that does not come
 * back to its idle count.
 */
export function descriptors(pid) {
  const kinds = {};
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue; // closed while we looked
    }
    const kind = target.startsWith('socket:') ? 'socket' : target.startsWith('pipe:') ? 'pipe' : target.startsWith('anon_inode:') ? target : 'file';
    kinds[kind] = (kinds[kind] ?? 0) + 1;
  }
  return kinds;
}

export const total = (kinds) => Object.values(kinds).reduce((a, b) => a + b, 0);

/** Every process as { pid, ppid, state, argv0 }, read in one pass over /proc. */
function processTable() {
  const table = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
      const argv0 = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0')[0];
      table.push({ pid: Number(entry), ppid: Number(rest[1]), state: rest[0], argv0 });
    } catch {
      // exited while we looked
    }
  }
  return table;
}

/**
 * The processes envd is responsible for: its children (the spawner, receivers,
 * relays), every process of its holder binary (holders are forked by the
 * spawner and run in their own sessions; their argv[0] is the binary envd wrote
 * into its state directory), and all their descendants (the commands).
 * `zombies` counts those left unreaped, envd's own children included.
 */
export function processes(envdPid, stateDir) {
  const table = processTable();
  const binDir = join(stateDir, 'bin') + '/';
  const roots = table.filter((p) => p.ppid === envdPid || p.argv0.startsWith(binDir));
  const children = new Map();
  for (const p of table) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const seen = new Map();
  const stack = [...roots];
  while (stack.length) {
    const p = stack.pop();
    if (seen.has(p.pid)) continue;
    seen.set(p.pid, p);
    stack.push(...(children.get(p.pid) ?? []));
  }
  const all = [...seen.values()];
  return {
    count: all.filter((p) => p.state !== 'Z').length,
    holders: all.filter((p) => p.argv0.startsWith(binDir) && p.ppid !== envdPid && p.state !== 'Z').length,
    zombies: all.filter((p) => p.state === 'Z').length,
  };
}

/** Files under a directory, recursively (a missing directory has none). */
function countFiles(dir) {
  if (!existsSync(dir)) return 0;
  let count = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    count += entry.isDirectory() ? 1 + countFiles(join(dir, entry.name)) : 1;
  }
  return count;
}

/** What envd keeps on disk for commands: their state directories, spool files, and cgroups. */
export function kept(stateDir, spoolDir) {
  const cmds = join(stateDir, 'cmds');
  return {
    stateDirs: existsSync(cmds) ? readdirSync(cmds).length : 0,
    spoolFiles: countFiles(spoolDir),
    cgroups: existsSync(COMMAND_CGROUPS) ? readdirSync(COMMAND_CGROUPS, { withFileTypes: true }).filter((e) => e.isDirectory()).length : 0,
  };
}

/** The socket inodes of a process, from its descriptors. */
function socketInodes(pid) {
  const inodes = new Set();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(match[1]);
    } catch {
      // closed while we looked
    }
  }
  return inodes;
}

const TCP_STATES = { '01': 'ESTABLISHED', '02': 'SYN_SENT', '03': 'SYN_RECV', '04': 'FIN_WAIT1', '05': 'FIN_WAIT2', '06': 'TIME_WAIT', '07': 'CLOSE', '08': 'CLOSE_WAIT', '09': 'LAST_ACK', '0A': 'LISTEN', '0B': 'CLOSING' };

/**
 * What each of envd's sockets is, read from /proc/net: "tcp ESTABLISHED
 * 0100007F:8A2C->0100007F:C350", "unix /path" or "unix (unnamed)", "netlink".
 * Printed when descriptors do not come back to idle, so a leak names itself.
 */
export function socketDetails(pid) {
  const inodes = socketInodes(pid);
  const found = [];
  for (const table of ['tcp', 'tcp6', 'udp', 'udp6']) {
    let text = '';
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && inodes.delete(f[9])) found.push(`${table} ${TCP_STATES[f[3]] ?? f[3]} ${f[1]}->${f[2]}`);
    }
  }
  try {
    for (const line of readFileSync(`/proc/${pid}/net/unix`, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 6 && inodes.delete(f[6])) found.push(`unix ${f[7] ?? '(unnamed)'}`);
    }
  } catch {
    // no unix table
  }
  for (const inode of inodes) found.push(`other socket ${inode}`);
  return found.sort();
}

/**
 * The probe of a local envd behind the interface the soak reads any envd
 * through (soak-remote-probe.mjs has the other): memory every 100 ms for its
 * peak and low, and `sample()` returning them since the last sample with the
 * memory, descriptors, processes and kept files of now.
 */
export function startLocalProbe(envd) {
  const fresh = () => {
    const m = memory(envd.pid);
    return { peakRss: m.rss, peakAnon: m.anon, lowRss: m.rss, lowAnon: m.anon };
  };
  let window = fresh();
  const timer = setInterval(() => {
    const m = memory(envd.pid);
    window.peakRss = Math.max(window.peakRss, m.rss);
    window.peakAnon = Math.max(window.peakAnon, m.anon);
    window.lowRss = Math.min(window.lowRss, m.rss);
    window.lowAnon = Math.min(window.lowAnon, m.anon);
  }, 100);
  return {
    async sample() {
      const now = memory(envd.pid);
      const seen = window;
      window = fresh();
      return {
        ...now,
        peakRss: Math.max(seen.peakRss, now.rss),
        peakAnon: Math.max(seen.peakAnon, now.anon),
        lowRss: Math.min(seen.lowRss, now.rss),
        lowAnon: Math.min(seen.lowAnon, now.anon),
        fds: descriptors(envd.pid),
        procs: processes(envd.pid, envd.stateDir),
        kept: kept(envd.stateDir, envd.spoolDir),
        ...cpuTimes(),
      };
    },
    async stop() {
      clearInterval(timer);
    },
  };
}
