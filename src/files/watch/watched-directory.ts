import type { FSWatcher } from 'node:fs';
import type { ChangeType, RawEvent } from './replay.js';

/** A client's side of a watch, as the registry sees it. */
export interface WatchSubscriber {
  readonly recursive: boolean;
  /** A change under the subscriber's directory (its direct children only when not recursive); `path` absolute. */
  onChange(type: ChangeType, path: string): void;
  /**
   * The watch cannot go on: its directory was deleted or moved away (an
   * HttpError saying so), or a directory it needs could not be watched (the
   * error that stopped it). The registry has already let go of the subscriber.
   */
  onEnd(error: unknown): void;
}

/**
 * One directory watched with one `fs.watch` (one inotify watch), shared by
 * every client whose watch covers it. Nothing is kept per file; per directory,
 * only what the tree needs: its watched subdirectories, its parent, the
 * clients rooted here, the raw events not yet handled.
 */
export class WatchedDirectory {
  watcher: FSWatcher | undefined;
  /** A client root's watch on its parent, to see the root removed (registry.guard says why). */
  guard: FSWatcher | undefined;
  /** Set once the directory is released or gone: its events are ignored, its scans stop. */
  closed = false;
  /** The watched directory this one was found in by a recursive scan; undefined for a client's own root outside any. */
  parent: WatchedDirectory | undefined;
  /** Watched subdirectories by name: present while a recursive watch covers this directory. */
  children: Map<string, WatchedDirectory> | undefined;
  /** Clients whose watch is rooted here (created on first use: most directories have none). */
  subscribers: Set<WatchSubscriber> | undefined;
  /** The recursive scan that armed this directory's subtree: set while a recursive watch covers it; resolves once armed. */
  scanned: Promise<void> | undefined;
  /** Raw events received and not yet handled (handled together, see replayEvents). */
  pending: RawEvent[] | undefined;

  constructor(
    readonly path: string,
    /** The inode watched: a directory replaced at the same path is a different directory. */
    readonly ino: number,
    /** An O_PATH descriptor of it: everything in it is reached through this, never by path (closed with the node). */
    readonly fd: number,
  ) {}

  /** Whether a recursive client watch is rooted here. */
  hasRecursiveSubscriber(): boolean {
    if (!this.subscribers) return false;
    for (const subscriber of this.subscribers) if (subscriber.recursive) return true;
    return false;
  }
}
