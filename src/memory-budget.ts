import { HttpError } from './errors.js';

const MIB = 1024 * 1024;

/**
 * What envd holds on behalf of clients, bounded together (issue 45): each kind
 * of work takes its share from one budget before it starts, and gives it back
 * when its response is over. When a share is spent, new work of that kind
 * waits (up to RESERVE_WAIT_MS) for some to be given back, then gets a 503
 * "retry shortly": never more memory. docs/operations.md gives the split and
 * why each part costs what it reserves.
 */
export const MEMORY_SPLIT = {
  /** Stream and attach clients: one holder message and one event in flight each (a stalled reader holds no more). */
  streams: 24 * MIB,
  /** Downloads (the one chunk a client has not taken) and uploads that go through Node (under 1 MiB, or chunked). */
  transfers: 16 * MIB,
  /** Archives: a download's piece (and gzip's state), an upload's relayed input and its two 1 MiB write buffers. */
  archives: 8 * MIB,
  /** Watch clients: their events on the way and what the registry keeps per directory. */
  watches: 4 * MIB,
} as const;

export type MemoryPart = keyof typeof MEMORY_SPLIT;

/** The whole budget: the sum of the split. */
export const MEMORY_BUDGET_BYTES = Object.values(MEMORY_SPLIT).reduce((a, b) => a + b, 0);

/** The split of a budget of `total` bytes, in MEMORY_SPLIT's proportions (--client-memory-bytes). */
export function splitOf(total: number): Record<MemoryPart, number> {
  const scale = total / MEMORY_BUDGET_BYTES;
  return Object.fromEntries(Object.entries(MEMORY_SPLIT).map(([part, bytes]) => [part, Math.floor(bytes * scale)])) as Record<MemoryPart, number>;
}

/** What one piece of work of each kind reserves. */
export const RESERVE_BYTES = {
  stream: 192 * 1024,
  /** A raw download reads no further ahead than the chunk its client has not taken (0.82-0.92 MiB measured stalled, issue 36). */
  download: MIB,
  upload: 256 * 1024,
  /** A tar download pins one piece; a tar.gz one a piece and gzip's state (1.4-1.5 MiB measured stalled). */
  archiveDownload: 2 * MIB,
  /** An archive upload: its relayed input and its two 1 MiB write buffers. */
  archiveUpload: 4 * MIB,
  watch: 16 * 1024,
} as const;

/** How long new work waits for its share before it is answered 503. */
export const RESERVE_WAIT_MS = 30_000;

/** What a piece of work holds; release() gives it back (once, however often it is called). */
export interface Reservation {
  release(): void;
}

interface Waiter {
  bytes: number;
  grant: () => void;
}

/**
 * The budget's book-keeping: bytes held per part, and per part a queue of
 * work waiting for its share, served in order as shares come back. What work
 * gave back is garbage until V8 collects it: the memory reclaim collects
 * buffers once they grew 16 MiB (src/memory-reclaim.ts).
 */
export class MemoryBudget {
  private readonly held = new Map<MemoryPart, number>();
  private readonly waiting = new Map<MemoryPart, Waiter[]>();

  constructor(
    private readonly split: Record<MemoryPart, number> = MEMORY_SPLIT,
    private readonly waitMs = RESERVE_WAIT_MS,
  ) {}

  /** Bytes held now, per part and in all. */
  usage(): { total: number } & Record<MemoryPart, number> {
    const parts = Object.fromEntries(Object.keys(this.split).map((part) => [part, this.held.get(part as MemoryPart) ?? 0])) as Record<MemoryPart, number>;
    return { total: Object.values(parts).reduce((a, b) => a + b, 0), ...parts };
  }

  /** Takes `bytes` from `part` now, or once enough comes back; rejects with a 503 after the wait. */
  reserve(part: MemoryPart, bytes: number): Promise<Reservation> {
    const queue = this.waiting.get(part) ?? [];
    // Work already waiting goes first: a small request may not overtake a large one for good.
    if (queue.length === 0 && this.fits(part, bytes)) return Promise.resolve(this.take(part, bytes));
    if (bytes > this.split[part]) return Promise.reject(this.spent(part));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        queue.splice(queue.indexOf(waiter), 1);
        reject(this.spent(part));
        // The head that gave up may have blocked smaller work behind it.
        this.serve(part);
      }, this.waitMs);
      const waiter: Waiter = {
        bytes,
        grant: () => {
          clearTimeout(timer);
          resolve(this.take(part, bytes));
        },
      };
      queue.push(waiter);
      this.waiting.set(part, queue);
    });
  }

  /**
   * Takes `bytes` from `part` only if they are free now and no work waits for them: for work that
   * grows as it goes and stops growing (and says so) rather than wait, such as a session command's
   * JSON result.
   */
  takeNow(part: MemoryPart, bytes: number): Reservation | undefined {
    if ((this.waiting.get(part)?.length ?? 0) > 0 || !this.fits(part, bytes)) return undefined;
    return this.take(part, bytes);
  }

  private fits(part: MemoryPart, bytes: number): boolean {
    return (this.held.get(part) ?? 0) + bytes <= this.split[part];
  }

  private take(part: MemoryPart, bytes: number): Reservation {
    this.held.set(part, (this.held.get(part) ?? 0) + bytes);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.held.set(part, this.held.get(part)! - bytes);
        this.serve(part);
      },
    };
  }

  /** Grants the share to waiting work, in order, while it fits (each grant takes its bytes at once). */
  private serve(part: MemoryPart): void {
    const queue = this.waiting.get(part);
    while (queue && queue.length > 0 && this.fits(part, queue[0]!.bytes)) queue.shift()!.grant();
  }

  private spent(part: MemoryPart): HttpError {
    return new HttpError(503, `envd's memory for ${part} (${this.split[part] / MIB} MiB of its ${MEMORY_BUDGET_BYTES / MIB} MiB for clients) is in use: retry shortly`, {
      headers: { 'retry-after': '1' },
    });
  }
}
