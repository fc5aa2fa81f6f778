import { closeSync, fstatSync, watch, type FSWatcher, type Stats } from 'node:fs';
import { basename } from 'node:path';
import { HttpError } from '../../errors.js';
import { directoryGone } from './describe-error.js';
import { childPath, inside, isStillThere, lstatQuietly, openQuietly, watchParent } from './directory-access.js';
import { DIRECTORY_READS_AT_ONCE, readEntries } from './read-entries.js';
import { replayEvents, type ChangeType, type RawEvent, type RawKind } from './replay.js';
import { WatchedDirectory, type WatchSubscriber } from './watched-directory.js';

/**
 * Directories envd watches at once, over every client. Each costs ~1 KiB of
 * envd's memory (an fs.watch handle and its place in the tree) plus one
 * inotify watch of the kernel's `max_user_watches`; this keeps a tree of
 * millions of directories from taking the daemon's memory with it.
 */
export const WATCHED_DIRECTORY_LIMIT = 50_000;

/** Where a shared listener finds the directory its watcher watches. */
const DIRECTORY = Symbol('watched directory');
type DirectoryWatcher = FSWatcher & { [DIRECTORY]?: WatchedDirectory };

export interface Subscription {
  /** Resolves once every directory the watch covers is watched (at once for a non-recursive watch). */
  ready: Promise<void>;
  /** Lets go of the client; directories nobody needs any more are released. Safe to call twice. */
  release(): void;
}

/**
 * Every directory envd watches, one `fs.watch` each, shared by all client
 * watches that cover it: twenty clients on one tree hold one inotify watch
 * per directory, not twenty. A recursive client covers its directory and
 * everything below; a directory stays watched while some client covers it.
 *
 * Raw events are handled once per directory, in batches (everything libuv
 * read in one go, see `replayEvents`), then told to the clients rooted at the
 * directory and to the recursive clients above it. New subdirectories of a
 * covered directory are armed first and read second, so nothing created in
 * between is missed; what the read finds is reported as `create`. A
 * subdirectory that disappears (deleted, moved away, replaced) is released
 * with everything under it, and clients rooted inside it end.
 *
 * The tree is a user's: every watched directory holds an O_PATH descriptor
 * of itself, and everything in it (its listing, its inotify watch, what its
 * events name, its subdirectories' descriptors) is reached relative to that
 * descriptor, spelled `/proc/self/fd/N/name` (user-path.ts), never by path.
 * A user who swaps a directory, or one above it, for a symlink to root's
 * directory steers neither the watch nor what it reports: the watch stays
 * on the directories it found, and a subdirectory is opened O_NOFOLLOW.
 * Paths told to clients are the ones asked for, joined with entry names.
 *
 * IN_Q_OVERFLOW never reaches JavaScript: libuv drops events for the
 * watch descriptor -1. A burst beyond `fs.inotify.max_queued_events` (16,384)
 * loses events silently, as with any fs.watch user.
 */
export class WatchRegistry {
  private readonly directories = new Map<string, WatchedDirectory>();
  /** Directories with raw events waiting for the next flush, in the order their first event came. */
  private readonly dirty = new Set<WatchedDirectory>();
  private flushing: NodeJS.Immediate | undefined;
  // One pair of listeners for every watcher: a closure pair per directory
  // costs ~260 bytes more (measured over 4,000 directories), and a closed
  // tree's handles are garbage V8 collects only at its next full collection.
  private readonly onRaw: (this: DirectoryWatcher, kind: string, name: string | null) => void;
  private readonly onError: (this: DirectoryWatcher, error: Error) => void;

  constructor() {
    const registry = this; // the listeners' own `this` is the watcher
    this.onRaw = function (kind, name) {
      const node = this[DIRECTORY];
      if (node) registry.record(node, kind as RawKind, name);
    };
    this.onError = function (error) {
      const node = this[DIRECTORY];
      if (node) registry.fail(node, error, true);
    };
  }

  /** How many directories are watched (one inotify watch each). */
  get size(): number {
    return this.directories.size;
  }

  /**
   * Adds a client watch rooted at the directory `root`, open as `fd` (inode
   * `ino`, from the caller's fstat; the registry owns `fd` from here, and
   * closes it when it is not needed). Throws if the root itself cannot be
   * watched. Later failures (a subdirectory that cannot be watched, the root
   * deleted) reach the subscriber through `onEnd`, even before `ready` resolves.
   */
  subscribe(root: string, fd: number, ino: number, subscriber: WatchSubscriber): Subscription {
    let node = this.directories.get(root);
    // Replaced since it was armed, and its events not read yet: a new directory.
    if (node && node.ino !== ino) {
      this.markGone(node);
      node = undefined;
    }
    if (node) closeSync(fd);
    else node = this.arm(root, ino, fd);
    this.guard(node);
    (node.subscribers ??= new Set()).add(subscriber);
    const armed = node;
    return {
      ready: subscriber.recursive ? (armed.scanned ??= this.scan(armed, false)) : Promise.resolve(),
      release: () => this.unsubscribe(armed, subscriber),
    };
  }

  private unsubscribe(node: WatchedDirectory, subscriber: WatchSubscriber): void {
    if (!node.subscribers?.delete(subscriber)) return;
    if (node.subscribers.size === 0) node.subscribers = undefined;
    this.prune(node);
  }

  /** Whether a recursive client is rooted at the directory or above it. */
  private isCovered(node: WatchedDirectory): boolean {
    for (let at: WatchedDirectory | undefined = node; at; at = at.parent) if (at.hasRecursiveSubscriber()) return true;
    return false;
  }

  /** Releases what a directory no longer needs once no recursive client covers it: its subtree, then itself unless a client is rooted here. */
  private prune(node: WatchedDirectory): void {
    if (node.closed || this.isCovered(node)) return;
    const children = node.children;
    node.children = undefined;
    node.scanned = undefined;
    if (children) {
      for (const child of children.values()) {
        child.parent = undefined;
        this.prune(child);
      }
    }
    if (!node.subscribers) this.close(node);
  }

  /** Watches the directory open as `fd` (owned from here: closed with the node, or now if it cannot be watched). */
  private arm(path: string, ino: number, fd: number): WatchedDirectory {
    let watcher: DirectoryWatcher;
    try {
      if (this.directories.size >= WATCHED_DIRECTORY_LIMIT) {
        throw new HttpError(503, `${path}: envd watches at most ${WATCHED_DIRECTORY_LIMIT} directories at once; watch a smaller tree`);
      }
      // Not persistent: a watch never keeps envd alive on its own at shutdown. inotify_add_watch
      // resolves the magic link to this very directory; nothing is looked up by name.
      watcher = watch(inside(fd), { persistent: false }, this.onRaw);
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    const node = new WatchedDirectory(path, ino, fd);
    watcher[DIRECTORY] = node;
    watcher.on('error', this.onError);
    node.watcher = watcher;
    this.directories.set(path, node);
    return node;
  }

  /** A client root's watch on its parent, to see it removed (watchParent says why). */
  private guard(node: WatchedDirectory): void {
    if (node.guard || node.path === '/') return;
    node.guard = watchParent(node, () => {
      if (!node.closed) this.record(node, 'rename', String(node.fd));
    });
  }

  private close(node: WatchedDirectory): void {
    if (node.closed) return;
    node.closed = true;
    node.watcher?.close();
    node.watcher = undefined;
    node.guard?.close();
    node.guard = undefined;
    closeSync(node.fd);
    if (this.directories.get(node.path) === node) this.directories.delete(node.path);
    const parent = node.parent;
    if (parent?.children) {
      const name = basename(node.path);
      if (parent.children.get(name) === node) parent.children.delete(name);
    }
    node.parent = undefined;
    node.children = undefined;
    node.subscribers = undefined;
    node.scanned = undefined;
    node.pending = undefined;
    this.dirty.delete(node);
  }

  /**
   * A subdirectory of a covered directory, watched: the one already watched
   * under that path (another client's root) or a new one. Null when it is no
   * longer a directory; throws when it cannot be watched.
   */
  private attach(parent: WatchedDirectory, name: string, ino?: number): WatchedDirectory | null {
    // Released meanwhile (its last client ended while it was being read or its events told):
    // nothing would ever release a subdirectory armed now.
    if (parent.closed || !this.isCovered(parent)) return null;
    const known = parent.children?.get(name);
    if (known && !known.closed) return known;
    const path = childPath(parent.path, name);
    // Opened without following, relative to the parent: a symlink swapped in for it is not entered.
    const fd = openQuietly(inside(parent.fd, name));
    if (fd === null) return null;
    let child = this.directories.get(path);
    try {
      const found = fstatSync(fd).ino;
      // Replaced since its event or listing: the parent's events say what became of it.
      if (ino !== undefined && found !== ino) {
        closeSync(fd);
        return null;
      }
      if (child && child.ino !== found) {
        // Another client's root by this path, but no longer the directory here.
        this.markGone(child);
        child = undefined;
      }
      if (child) closeSync(fd);
      else child = this.arm(path, found, fd);
    } catch (error) {
      // arm closed the fd; an fstat cannot fail on an open fd.
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return null;
      throw error;
    }
    child.parent = parent;
    (parent.children ??= new Map()).set(name, child);
    return child;
  }

  /**
   * Reads a watched directory and watches its subdirectories, all the way
   * down; `report` says every entry found as `create` (a directory that
   * appeared after `ready`, with whatever was put in it before its watch).
   * Directories wait in a list and are read a few at a time, so a tree of
   * 4,000 directories is not 4,000 pending reads at once. Every directory
   * armed by the scan shares its promise, which never rejects: a directory
   * that cannot be watched ends the clients that needed it (`fail`).
   */
  private scan(top: WatchedDirectory, report: boolean): Promise<void> {
    const { promise, resolve } = Promise.withResolvers<void>();
    const queue = [top];
    // Subdirectories another scan is arming (another client's root found inside this tree).
    const others: Promise<void>[] = [];
    let reading = 0;
    const next = () => {
      while (reading < DIRECTORY_READS_AT_ONCE && queue.length > 0) {
        reading++;
        void this.scanOne(queue.pop()!, report, promise, queue, others).then(() => {
          reading--;
          if (queue.length > 0 || reading > 0) next();
          else void Promise.all(others).then(() => resolve());
        });
      }
    };
    next();
    return promise;
  }

  /** One directory of a scan: its entries reported (when `report`), its subdirectories armed and queued. */
  private async scanOne(node: WatchedDirectory, report: boolean, scan: Promise<void>, queue: WatchedDirectory[], others: Promise<void>[]): Promise<void> {
    let entries;
    try {
      entries = await readEntries(inside(node.fd));
    } catch {
      // Removed or unreadable meanwhile: its parent's events say what became of it.
      return;
    }
    // Released while reading (the clients left), or gone.
    if (node.closed || !this.isCovered(node)) return;
    for (const entry of entries) {
      if (report) this.deliver(node, 'create', childPath(node.path, entry.name));
      // Dirent types come from lstat semantics: a symlink to a directory is not entered.
      if (!entry.isDirectory()) continue;
      let child;
      try {
        child = this.attach(node, entry.name);
      } catch (error) {
        return this.fail(node, error, false);
      }
      if (!child || child.scanned === scan) continue;
      if (child.scanned) {
        others.push(child.scanned);
      } else {
        child.scanned = scan;
        queue.push(child);
      }
    }
  }

  private record(node: WatchedDirectory, kind: RawKind, name: string | null): void {
    if (node.closed || name === null) return;
    (node.pending ??= []).push({ kind, name });
    this.dirty.add(node);
    // Everything libuv read from the inotify descriptor in this turn of the loop is handled together.
    this.flushing ??= setImmediate(() => this.flush());
  }

  private flush(): void {
    this.flushing = undefined;
    for (const node of this.dirty) {
      this.dirty.delete(node);
      const events = node.pending;
      node.pending = undefined;
      if (!node.closed && events) this.handle(node, events);
    }
  }

  private handle(node: WatchedDirectory, events: RawEvent[]): void {
    const found = new Map<string, Stats | null>();
    const lookup = (name: string): Stats | null => {
      let stats = found.get(name);
      if (stats === undefined) found.set(name, (stats = lstatQuietly(inside(node.fd, name))));
      return stats;
    };
    // libuv names the events of the watched directory itself (deleted, moved,
    // IN_IGNORED) after the path it watches (its descriptor's number); a child
    // of the same name is told apart by whether the directory is still where it was.
    const own = String(node.fd);
    const ownAt = events.findIndex((event) => event.name === own);
    const gone = ownAt !== -1 && !isStillThere(node);
    const handled = gone ? events.slice(0, ownAt) : events;

    for (const change of replayEvents(handled, (name) => lookup(name) !== null)) this.deliver(node, change.type, childPath(node.path, change.name));
    if (gone) return this.markGone(node);

    // Only a directory a recursive watch covers has subdirectories to follow.
    if (node.closed || !this.isCovered(node)) return;
    const renamed = new Set<string>();
    for (const event of handled) if (event.kind === 'rename') renamed.add(event.name);
    for (const name of renamed) this.settleChild(node, name, lookup(name));
  }

  /** After a name of a covered directory appeared or disappeared: its watch follows what is there now. */
  private settleChild(node: WatchedDirectory, name: string, stats: Stats | null): void {
    const child = node.children?.get(name);
    const isDirectory = stats?.isDirectory() ?? false;
    if (child && isDirectory && child.ino === stats!.ino) return;
    // Deleted, moved away, or replaced by another directory or a file.
    if (child) this.markGone(child);
    if (!isDirectory || node.closed) return;
    let created;
    try {
      created = this.attach(node, name, stats!.ino);
    } catch (error) {
      return this.fail(node, error, false);
    }
    if (created) created.scanned ??= this.scan(created, true);
  }

  /** Tells a change to the clients rooted at the directory, and to the recursive ones above it. */
  private deliver(node: WatchedDirectory, type: ChangeType, path: string): void {
    let direct = true;
    for (let at: WatchedDirectory | undefined = node; at; direct = false) {
      // Read first: a client that ends on this change (its backlog full) may release `at`.
      const parent: WatchedDirectory | undefined = at.parent;
      if (at.subscribers) for (const subscriber of at.subscribers) if (direct || subscriber.recursive) subscriber.onChange(type, path);
      at = parent;
    }
  }

  /** The directory is no longer at its path: it and its subtree are released, and clients rooted in them end. */
  private markGone(node: WatchedDirectory): void {
    if (node.closed) return;
    if (node.children) for (const child of [...node.children.values()]) this.markGone(child);
    const subscribers = node.subscribers;
    this.close(node);
    if (!subscribers) return;
    for (const subscriber of subscribers) {
      subscriber.onChange('delete', node.path);
      subscriber.onEnd(directoryGone(node.path));
    }
  }

  /**
   * A directory could not be watched (its own watch failed: `ownWatch`, or a
   * subdirectory's): the clients that need it end, and what they held is
   * released. Flat clients rooted here need only its own watch.
   */
  private fail(node: WatchedDirectory, error: unknown, ownWatch: boolean): void {
    const ending: Array<[WatchedDirectory, WatchSubscriber]> = [];
    let direct = true;
    for (let at: WatchedDirectory | undefined = node; at; at = at.parent, direct = false) {
      if (!at.subscribers) continue;
      for (const subscriber of at.subscribers) if (subscriber.recursive || (direct && ownWatch)) ending.push([at, subscriber]);
    }
    for (const [at, subscriber] of ending) {
      this.unsubscribe(at, subscriber);
      subscriber.onEnd(error);
    }
  }
}
