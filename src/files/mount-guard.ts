import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { HttpError } from '../errors.js';
import { MountProber } from './mount-prober.js';

/**
 * How long a file request waits for a network or FUSE file system to answer
 * before it is a 503. An NFS server or FUSE daemon that has not answered a
 * statfs in 5 s is gone for the request's purposes; the client may retry.
 */
export const MOUNT_ANSWER_DEADLINE_MS = 5_000;
/**
 * Probe processes kept at once, one per network or FUSE mount in use (each a
 * static ~100 KiB process). Past this many, the one used longest ago that
 * waits for nothing makes room; when every one waits on a mount that has not
 * answered, a request on another mount is a 503 at once: nothing grows
 * without bound however many mounts hang.
 */
export const MAX_PROBES = 16;
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

/**
 * Keeps file requests (and commands' `cwd`) from waiting forever on a hung
 * network or FUSE mount (issue 43, item 4). A call into such a mount blocks in
 * the kernel; on envd's thread pool (four threads) four of them stalled every
 * file route, and nothing can take a blocked thread back. So before a request
 * touches a path on a mount that is not local, the mount is asked whether it
 * answers by its probe process (MountProber: statfs, answered by the server or
 * daemon itself, never a cache), and the request waits at most
 * MOUNT_ANSWER_DEADLINE_MS for the answer. A mount whose question is older
 * than that is a 503 for every request on it, at once, until it answers; its
 * probe waits on meanwhile (one per mount, at most MAX_PROBES). Closing the
 * guard ends every probe (SIGKILL for waiting ones: NFS and FUSE wait killably).
 *
 * Which mounts a request touches is read from its path as written: the mounts
 * at and above it, and for tree routes those below it. A symlink into a hung
 * mount from elsewhere, or a mount that stops answering between its probe and
 * the operation, can still hold a pool thread (docs/operations.md).
 */
export class MountGuard {
  private table: { read: number; mounts: Mount[] } | undefined;
  private readonly probers = new Map<string, MountProber>();

  constructor(
    /** The envd-holder binary (its --probe mode). */
    private readonly holder: string,
    private readonly readMountInfo: () => string = () => readFileSync('/proc/self/mountinfo', 'utf8'),
  ) {}

  /** Asks the mounts the request's paths touch; a 503 when one does not answer in time. */
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

  /** Ends every probe (app close). */
  close(): void {
    for (const prober of this.probers.values()) prober.stop();
    this.probers.clear();
  }

  private async answering(mount: Mount, path: string): Promise<void> {
    const { since, answered } = this.proberFor(mount, path).ask();
    const left = since + MOUNT_ANSWER_DEADLINE_MS - performance.now();
    if (left <= 0) throw notAnswering(path, mount, since);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(resolve, left, 'late')));
    const outcome = await Promise.race([answered, late]);
    clearTimeout(timer);
    if (outcome === 'late') throw notAnswering(path, mount, since);
  }

  private proberFor(mount: Mount, path: string): MountProber {
    const known = this.probers.get(mount.point);
    if (known) return known;
    if (this.probers.size >= MAX_PROBES) {
      let idle: MountProber | undefined;
      for (const prober of this.probers.values()) if (prober.waitingSince === undefined && (!idle || prober.lastUsed < idle.lastUsed)) idle = prober;
      if (!idle) {
        throw new HttpError(503, `${path}: ${this.probers.size} mounts have not answered (the most envd waits on at once); the ${mount.type} file system at ${mount.point} is not tried until one does`);
      }
      this.probers.delete(idle.mount.point);
      idle.stop();
    }
    const prober: MountProber = new MountProber(this.holder, mount, () => {
      if (this.probers.get(mount.point) === prober) this.probers.delete(mount.point);
    });
    this.probers.set(mount.point, prober);
    return prober;
  }

  private remoteMounts(): Mount[] {
    const now = performance.now();
    if (!this.table || now - this.table.read > MOUNT_TABLE_TTL_MS) {
      this.table = { read: now, mounts: parseMountInfo(this.readMountInfo()).filter((mount) => !LOCAL_TYPES.has(mount.type)) };
      // A mount that is gone takes its probe with it.
      const points = new Set(this.table.mounts.map((mount) => mount.point));
      for (const [point, prober] of this.probers) {
        if (points.has(point)) continue;
        this.probers.delete(point);
        prober.stop();
      }
    }
    return this.table.mounts;
  }
}

function notAnswering(path: string, mount: Mount, since: number): HttpError {
  const seconds = Math.round((performance.now() - since) / 1000);
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
