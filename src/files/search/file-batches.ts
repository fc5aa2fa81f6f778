import { closeSync } from 'node:fs';
import type { SearchCalls } from '../../native/search-calls.js';
import { packed, type OpenDir, type Reader } from './user-access.js';
import type { WalkEntry } from './walk.js';

/**
 * A search's per-file work on libuv's thread pool (src/native/search-batch.c):
 * the walk (on the event loop) hands its files over in batches, the pool's
 * threads open and check them on the machine's other CPUs, and only the
 * files that can match come back, still open, to be scanned in JavaScript.
 * On the event loop alone a search used one CPU where ripgrep used all.
 */

/** Files per job: a job is a few milliseconds (one open, fstat, read and close a file), so a stop is seen soon. */
export const SEARCH_BATCH_FILES = 128;
/**
 * Jobs in flight at once: two keep both CPUs busy beside the walk, a third
 * covers the event loop's time to take a finished one. libuv's pool has four
 * threads; the others stay free for the rest of envd's file calls.
 */
export const SEARCH_BATCHES_IN_FLIGHT = 3;
/**
 * Each job reads its files through one buffer of this size (search-batch.c's
 * SCAN_READ_BYTES): the bytes a search holds in flight are at most
 * SEARCH_BATCHES_IN_FLIGHT times this, whatever the sizes of its files.
 */
export const SEARCH_BATCH_READ_BYTES = 64 * 1024;
/**
 * Each job copies its small candidates (all of a file that fits the scan's
 * first read) into an arena of this size, so the event loop neither opens nor
 * reads them again; the rest stay open (at most 16 a job, search-batch.c) or
 * are reopened. A search holds SEARCH_BATCHES_IN_FLIGHT arenas, reused.
 */
export const SEARCH_BATCH_ARENA_BYTES = 512 * 1024;

/** search-batch.c's verdicts; a negative one is -errno (not opened, as a file the walk may not read). */
export const Verdict = { skipped: 0, noMatch: 1, candidate: 2, notReached: 3, reopen: 4 } as const;
const FIELDS = 4;

export interface Batch {
  entries: WalkEntry[];
  /** Set once the job has finished: 4 numbers a file (verdict, candidate's fd, size, where its bytes are in `arena`). */
  results: Float64Array | undefined;
  /** Resolves when the job has finished (or failed: `failure`). */
  done: Promise<void>;
  failure: unknown;
  /** How many of `entries` the search has taken (their candidates' descriptors are the search's to close). */
  taken: number;
  arena: Buffer;
  /** The directories of `entries`, held open until the batch is taken: a file the job closed is reopened through them. */
  held: OpenDir[];
}

export class FileBatches {
  /** search-batch.c reads [0] between files and reads: 1 ends every job in flight. Its own ArrayBuffer: V8 never moves that memory. */
  private readonly stopFlag = new Int32Array(new ArrayBuffer(4));
  private filling: WalkEntry[] = [];
  private readonly queue: Batch[] = [];
  private readonly reader: Int32Array | null;
  /** Arenas of batches taken, for the next ones. */
  private readonly arenas: Buffer[] = [];

  constructor(
    private readonly calls: SearchCalls,
    reader: Reader | undefined,
    private readonly needle: Buffer | undefined,
    /** How many bytes the scan's first read takes (the binary check without a needle). */
    private readonly firstBytes: number,
    private readonly maxBytes: number,
  ) {
    this.reader = packed(reader);
  }

  /** Directories of `filling`, held open from the moment their file is added: the walk closes a directory once it has listed it. */
  private held: OpenDir[] = [];

  /** Adds a file of the walk; a full batch is queued to the pool. */
  add(entry: WalkEntry): void {
    this.filling.push(entry);
    if (this.held[this.held.length - 1] !== entry.dir) {
      entry.dir.hold();
      this.held.push(entry.dir);
    }
    if (this.filling.length >= SEARCH_BATCH_FILES) this.submit();
  }

  /** Queues what was added since the last batch (the walk's end). */
  submit(): void {
    if (this.filling.length === 0) return;
    const entries = this.filling;
    this.filling = [];
    const dirfds = new Int32Array(entries.length);
    const held = this.held;
    this.held = [];
    const names: Buffer[] = [];
    let text = '';
    for (let i = 0; i < entries.length; i++) {
      const { dir, name } = entries[i]!;
      dirfds[i] = dir.fd;
      // Names joined as text (one conversion a batch); a name that is not UTF-8 goes in as its bytes.
      if (typeof name === 'string') text += `${name}\0`;
      else {
        names.push(Buffer.from(text), name, Buffer.from([0]));
        text = '';
      }
    }
    const joined = names.length === 0 ? Buffer.from(text) : Buffer.concat([...names, Buffer.from(text)]);
    const arena = this.arenas.pop() ?? Buffer.allocUnsafeSlow(SEARCH_BATCH_ARENA_BYTES);
    const batch: Batch = { entries, results: undefined, done: Promise.resolve(), failure: undefined, taken: 0, arena, held };
    let job: Promise<Float64Array>;
    try {
      job = this.calls.scanFiles(dirfds, joined, this.reader, this.needle ?? null, this.firstBytes, this.maxBytes, this.stopFlag, arena);
    } catch (error) {
      // Not queued (the addon refused its arguments): nothing holds these directories for it.
      for (const dir of held) dir.release();
      throw error;
    }
    batch.done = job.then(
      (results) => {
        batch.results = results;
      },
      (error: unknown) => {
        batch.failure = error ?? new Error('search batch failed');
      },
    );
    this.queue.push(batch);
  }

  /** The oldest batch in flight (results go out in the walk's order). */
  get head(): Batch | undefined {
    return this.queue[0];
  }

  get full(): boolean {
    return this.queue.length >= SEARCH_BATCHES_IN_FLIGHT;
  }

  /** Drops the head once the search has taken all its files. */
  shift(): void {
    const batch = this.queue.shift();
    if (batch) this.finished(batch);
  }

  private finished(batch: Batch): void {
    for (const dir of batch.held) dir.release();
    this.arenas.push(batch.arena);
  }

  /** A file's verdict, descriptor, size and where its bytes are in the batch's arena (-1: not there). */
  static result(batch: Batch, index: number): { verdict: number; fd: number; size: number; at: number } {
    const at = index * FIELDS;
    const results = batch.results!;
    return { verdict: results[at]!, fd: results[at + 1]!, size: results[at + 2]!, at: results[at + 3]! };
  }

  /**
   * Ends the search's batches: jobs still running stop at their next file or
   * read, and every candidate left open that the search did not take is
   * closed. Resolves once no job holds a descriptor.
   */
  async stop(): Promise<void> {
    this.stopFlag[0] = 1;
    this.filling = [];
    for (const dir of this.held.splice(0)) dir.release();
    const batches = this.queue.splice(0);
    await Promise.all(batches.map((batch) => batch.done));
    for (const batch of batches) {
      this.finished(batch);
      if (!batch.results) continue;
      for (let i = batch.taken; i < batch.entries.length; i++) {
        const { verdict, fd } = FileBatches.result(batch, i);
        if (verdict === Verdict.candidate && fd >= 0) closeSync(fd);
      }
    }
  }
}
