import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { HttpError } from '../errors.js';

/**
 * How long a file request waits for a network or FUSE file system to answer
 * before it is a 503. An NFS server or FUSE daemon that has not answered a
 * statfs in 5 s is gone for the request's purposes; the client may retry.
 */
export const MOUNT_ANSWER_DEADLINE_MS = 5_000;
/**
 * Probes left waiting on mounts that did not answer (one per such mount, each
 * a blocked ~100 KiB process). Past this many, a request that needs a new
 * probe is a 503 at once: nothing grows without bound however many mounts hang.
 */
export const MAX_WAITING_PROBES = 16;
/**
 * How long the parsed mount table is reused: reading /proc/self/mountinfo
 * costs 60-90 µs, a third of a small request. A mount made within this long
 * of the last read is not guarded yet (docs/operations.md).
 */
export const MOUNT_TABLE_TTL_MS = 250;

/**
 * File systems whose calls never wait on another process or machine: no
 * probe for them. Anything else (nfs, cifs, 9p, virtiofs, fuse.*, ceph, and
 * types this list has never heard of) is probed.
 */
const LOCAL_TYPES = new Set([
  'ext2', 'ext3', 'ext4', 'xfs', 'btrfs', 'f2fs', 'vfat', 'exfat', 'msdos', 'iso9660', 'squashfs', 'erofs',
  'tmpfs', 'ramfs', 'devtmpfs', 'devpts', 'proc', 'sysfs', 'cgroup', 'cgroup2', 'mqueue', 'hugetlbfs',
  'debugfs', 'tracefs', 'securityfs', 'pstore', 'bpf', 'configfs', 'binfmt_misc', 'efivarfs', 'nsfs',
  'fusectl', 'selinuxfs', 'overlay', 'rootfs',
]);

/** Routes that work on a whole tree: a mount anywhere under their path matters too. */
const TREE_ROUTES = new Set(['GET /files/archive', 'PUT /files/archive', 'DELETE /files', 'GET /files/list', 'POST /files/watch', 'POST /files/search', 'GET /files/find']);

export interface Mount {
  point: string;
  type: string;
}

/** One probe of one mount, shared by every request that needs that mount while it runs. */
interface Probe {
  child: ChildProcess;
  started: number;
  answered: Promise<void>;
  /** Past its deadline: requests on this mount are 503 at once until it exits. */
  late: boolean;
}

/**
 * Keeps file requests (and commands' `cwd`) from waiting forever on a hung network or FUSE mount
 * (issue 43, item 4). A call into such a mount blocks in the kernel; on
 * envd's thread pool (four threads) four of them stalled every file route, and
 * nothing can take a blocked thread back. So before a request touches a path
 * on a mount that is not local, the mount is asked whether it answers —
 * `envd-holder --probe MOUNTPOINT` (statfs, answered by the server or daemon
 * itself, never a cache) in its own process — and the request waits at most
 * MOUNT_ANSWER_DEADLINE_MS for it. A mount that did not answer is a 503 for
 * every request on it, at once, while the probe waits on (one per mount,
 * at most MAX_WAITING_PROBES); when the probe exits, the mount answered, and
 * the next request probes it again. Closing the guard SIGKILLs waiting probes
 * (NFS and FUSE wait killably).
 *
 * Which mounts a request touches is read from its path as written: the mounts
 * at and above it, and for tree routes those below it. A symlink into a hung
 * mount from elsewhere, or a mount that stops answering between its probe and
 * the operation, can still hold a pool thread (docs/operations.md).
 */
export class MountGuard {
  private table: { read: number; mounts: Mount[] } | undefined;
  private readonly probes = new Map<string, Probe>();

  constructor(
    /** The envd-holder binary (its --probe mode). */
    private readonly holder: string,
    private readonly readMountInfo: () => string = () => readFileSync('/proc/self/mountinfo', 'utf8'),
  ) {}

  /** Probes the mounts the request's paths touch; a 503 when one does not answer in time. */
  async check(route: string, paths: readonly string[]): Promise<void> {
    const remote = this.remoteMounts();
    if (remote.length === 0 || paths.length === 0) return;
    const tree = TREE_ROUTES.has(route);
    const touched = new Map<string, { mount: Mount; path: string }>();
    for (const path of paths) {
      for (const mount of remote) {
        if (isWithin(path, mount.point) || (tree && isWithin(mount.point, path))) touched.set(mount.point, { mount, path });
      }
    }
    await Promise.all([...touched.values()].map(({ mount, path }) => this.answering(mount, path)));
  }

  /** SIGKILLs every waiting probe (app close). */
  close(): void {
    for (const probe of this.probes.values()) probe.child.kill('SIGKILL');
  }

  private async answering(mount: Mount, path: string): Promise<void> {
    let probe = this.probes.get(mount.point);
    if (probe?.late) throw notAnswering(path, mount, probe);
    if (!probe) {
      // Only probes past their deadline count: one that is merely running is one per mount in use, and ends.
      const late = [...this.probes.values()].filter((waiting) => waiting.late).length;
      if (late >= MAX_WAITING_PROBES) {
        throw new HttpError(503, `${path}: ${late} mounts have not answered (the most envd waits on at once); the ${mount.type} file system at ${mount.point} is not tried until one does`);
      }
      probe = this.startProbe(mount);
    }
    const left = probe.started + MOUNT_ANSWER_DEADLINE_MS - Date.now();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(resolve, Math.max(0, left), 'late')));
    const outcome = await Promise.race([probe.answered, late]);
    clearTimeout(timer);
    if (outcome === 'late') {
      probe.late = true;
      throw notAnswering(path, mount, probe);
    }
  }

  private startProbe(mount: Mount): Probe {
    const child = spawn(this.holder, ['--probe', mount.point], { stdio: 'ignore' });
    let settle!: () => void;
    const answered = new Promise<void>((resolve) => (settle = resolve));
    const probe: Probe = { child, started: Date.now(), answered, late: false };
    this.probes.set(mount.point, probe);
    const done = () => {
      if (this.probes.get(mount.point) === probe) this.probes.delete(mount.point);
      settle();
    };
    // A probe that cannot start (no processes left) lets the request go on as it did before the guard.
    child.once('error', done);
    child.once('exit', done);
    return probe;
  }

  private remoteMounts(): Mount[] {
    const now = Date.now();
    if (!this.table || now - this.table.read > MOUNT_TABLE_TTL_MS) {
      this.table = { read: now, mounts: parseMountInfo(this.readMountInfo()).filter((mount) => !LOCAL_TYPES.has(mount.type)) };
    }
    return this.table.mounts;
  }
}

function notAnswering(path: string, mount: Mount, probe: Probe): HttpError {
  const seconds = Math.round((Date.now() - probe.started) / 1000);
  return new HttpError(503, `${path}: the ${mount.type} file system at ${mount.point} has not answered for ${seconds} s; retry when it does`);
}

/** Is `path` `dir` or inside it (both normalised and absolute)? */
function isWithin(path: string, dir: string): boolean {
  return dir === '/' || path === dir || path.startsWith(`${dir}/`);
}

/**
 * Mount points and types from /proc/self/mountinfo:
 * `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER`,
 * with space, tab, newline and backslash in names written as octal escapes.
 */
export function parseMountInfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    if (fields.length < 7 || dash < 0 || dash + 1 >= fields.length) continue;
    mounts.push({ point: unescapeOctal(fields[4]!), type: fields[dash + 1]! });
  }
  return mounts;
}

const unescapeOctal = (text: string) => text.replace(/\\([0-7]{3})/g, (_, code: string) => String.fromCharCode(parseInt(code, 8)));

/** The paths a request names (`path`, `from`, `to`, `cwd`, `files[].path` in its query or body), normalised; invalid ones are left to the route's own 400. */
export function requestPaths(...sources: unknown[]): string[] {
  const paths: string[] = [];
  const add = (value: unknown) => {
    if (typeof value === 'string' && value.startsWith('/') && !value.includes('\0')) paths.push(posix.resolve(value));
  };
  for (const source of sources) {
    if (typeof source !== 'object' || source === null) continue;
    const fields = source as Record<string, unknown>;
    add(fields.path);
    add(fields.from);
    add(fields.to);
    add(fields.cwd);
    if (Array.isArray(fields.files)) for (const file of fields.files) add((file as Record<string, unknown> | null)?.path);
  }
  return paths;
}
