import { closeSync } from 'node:fs';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Pattern } from './pattern.js';
import { LITERAL_CHUNK_BYTES, REGEX_CHUNK_BYTES, scanFile, type LineMatch, type ScanOptions } from './scan.js';
import { OpenDir, openRootFile, type StartedFile } from './user-access.js';
import { walkTree, type WalkEntry, type WalkOptions } from './walk.js';
import { FileBatches, Verdict, type Batch } from './file-batches.js';
import type { SearchCalls } from '../../native/search-calls.js';

/**
 * Synchronous work between two turns of the event loop. The walk and the
 * scans of candidate files are synchronous calls (a thread-pool round trip
 * per open, read and close would make a search of node_modules several times
 * slower; files go to the pool a batch per job instead, file-batches.ts);
 * slicing them keeps /health and every other request answering while a search runs.
 */
export const SEARCH_SLICE_MS = 4;

export interface SearchRequest {
  root: string;
  pattern: Pattern;
  walk: WalkOptions;
  scan: ScanOptions;
  maxResults: number;
  timeoutMs: number;
}

export interface SearchMatch extends LineMatch {
  type: 'match';
  /** UTF-8; a name that is not UTF-8 shows U+FFFD here, and the exact bytes are in `path_base64`. */
  path: string;
  path_base64?: string;
}

export interface SearchSummary {
  type: 'summary';
  files_scanned: number;
  files_matched: number;
  matches: number;
  /** max_results was reached, the time budget ran out (`timed_out`), or directories past the walk's depth (256) were left out. */
  truncated: boolean;
  timed_out: boolean;
  elapsed_ms: number;
}

/** Where results go: `write` takes NDJSON text; `waitForRoom` resolves once a slow client has read enough; `gone` is true once it disconnected. */
export interface SearchSink {
  write(text: string): void;
  waitForRoom(): Promise<void>;
  readonly gone: boolean;
}

/**
 * Opens the root before anything is sent, so that a missing path or one the
 * user may not read is a plain 4xx answer; the returned function runs the search.
 */
export function prepareSearch(request: SearchRequest): (sink: SearchSink) => Promise<SearchSummary> {
  const file = openRootFile(request.root, request.walk.reader);
  const dir = file ? undefined : OpenDir.openRoot(request.root, request.walk.reader, request.walk.searchCalls);
  return (sink) => runSearch(request, sink, file, dir);
}

async function runSearch(request: SearchRequest, sink: SearchSink, file: { fd: number; size: number } | undefined, root: OpenDir | undefined): Promise<SearchSummary> {
  const started = performance.now();
  const deadline = started + request.timeoutMs;
  const summary: SearchSummary = { type: 'summary', files_scanned: 0, files_matched: 0, matches: 0, truncated: false, timed_out: false, elapsed_ms: 0 };
  // One read buffer for the whole search: memory does not grow with the tree or its files.
  const buffer = Buffer.allocUnsafe(request.pattern.literal !== undefined ? LITERAL_CHUNK_BYTES : REGEX_CHUNK_BYTES);
  let out = '';
  let sliceEnd = performance.now() + SEARCH_SLICE_MS;
  const flush = () => {
    if (out !== '') sink.write(out);
    out = '';
  };
  /** False once the client left or the time budget ran out: the search stops. */
  const goOn = () => {
    if (performance.now() > deadline) summary.timed_out = summary.truncated = true;
    return !sink.gone && !summary.timed_out;
  };
  /** Between slices: flush what was found, wait for a slow client, let the event loop run. False: stop. */
  const pause = async (): Promise<boolean> => {
    flush();
    await sink.waitForRoom();
    await nextTurn();
    sliceEnd = performance.now() + SEARCH_SLICE_MS;
    return goOn();
  };
  const search = function* (file: Omit<StartedFile, 'length'> & { length: number | undefined }, path: string, pathBytes: Buffer | undefined): Generator<void, void, undefined> {
    summary.files_scanned++;
    const where = pathBytes ? { path, path_base64: pathBytes.toString('base64') } : { path };
    const lines = yield* scanFile(file.fd, file.size, file.length, buffer, request.pattern, request.scan, (match) => {
      out += `${JSON.stringify({ type: 'match', ...where, ...match })}\n`;
      // The first match goes out at once (the rest at the end of each slice): an agent may stop reading there.
      if (summary.matches === 0) flush();
      if (++summary.matches >= request.maxResults) summary.truncated = true;
      return !summary.truncated;
    });
    if (lines > 0) summary.files_matched++;
  };
  const prefix = root && root.path !== '/' ? `${root.path}/` : '/';
  /** Scans an open file of the walk (or the root file), in slices; false: the search stops. */
  const scanOpened = async (opened: Omit<StartedFile, 'length'> & { length: number | undefined }, entry: Pick<WalkEntry, 'rel' | 'relBytes'> | undefined): Promise<boolean> => {
    const path = entry ? prefix + entry.rel : request.root;
    const pathBytes = entry?.relBytes && Buffer.concat([Buffer.from(prefix), entry.relBytes]);
    for (const _ of search(opened, path, pathBytes)) {
      if (performance.now() > sliceEnd && !(await pause())) return false;
    }
    return !summary.truncated;
  };
  const finish = (): SearchSummary => {
    flush();
    summary.elapsed_ms = Math.round(performance.now() - started);
    return summary;
  };

  if (file) {
    try {
      // Empty files have nothing to match, and /proc's and /sys's pseudo-files say size 0: some (kmsg) block a read forever.
      if (file.size > 0 && !(request.scan.maxFileBytes > 0 && file.size > request.scan.maxFileBytes)) await scanOpened({ ...file, length: undefined }, undefined);
      return finish();
    } finally {
      closeSync(file.fd);
    }
  }
  const report = { tooDeep: 0 };
  const walk = walkTree(root!, request.walk, false, report);
  const calls = request.walk.searchCalls;
  try {
    if (calls) await searchOnPool(calls);
    else await searchInline();
    // Directories past the walk's depth were not searched: the answer is not all there is.
    if (report.tooDeep > 0) summary.truncated = true;
    return finish();
  } finally {
    walk.return();
    root!.close();
  }

  /** Without the addon: each file opened and scanned on the event loop, in slices. */
  async function searchInline(): Promise<void> {
    for (const entry of walk) {
      if (performance.now() > sliceEnd && !(await pause())) return;
      if (!(await openAndScan(entry))) return;
    }
  }

  /** Opens a file of the walk and reads its first chunk in one step, then scans it; false: the search stops. */
  async function openAndScan(entry: WalkEntry): Promise<boolean> {
    const opened = entry.dir.startFile(entry.name, request.walk.reader, buffer, request.scan.maxFileBytes);
    // Empty files have nothing to match, and /proc's and /sys's pseudo-files say size 0: some (kmsg) block a read forever.
    if (!opened || opened.size === 0 || (request.scan.maxFileBytes > 0 && opened.size > request.scan.maxFileBytes)) {
      if (opened && opened.fd >= 0) closeSync(opened.fd);
      return true;
    }
    try {
      return await scanOpened(opened, entry);
    } finally {
      if (opened.fd >= 0) closeSync(opened.fd);
    }
  }

  /**
   * With the addon: the walk hands files to the thread pool in batches
   * (file-batches.ts), and the batches' results are taken in the walk's order,
   * the candidates scanned here.
   */
  async function searchOnPool(calls: SearchCalls): Promise<void> {
    const batches = new FileBatches(calls, request.walk.reader, request.pattern.needle, buffer.length, request.scan.maxFileBytes);
    /** Waits for a batch's job, still seeing a disconnect and the time budget; false: stop. */
    const settle = async (batch: Batch): Promise<boolean> => {
      while (!batch.results) {
        if (batch.failure) throw batch.failure;
        flush();
        await within(batch.done, BATCH_WAIT_CHECK_MS);
        if (!goOn()) return false;
      }
      sliceEnd = performance.now() + SEARCH_SLICE_MS;
      return true;
    };
    /** Counts a finished batch's files and scans its candidates, in order; false: stop. */
    const take = async (batch: Batch): Promise<boolean> => {
      while (batch.taken < batch.entries.length) {
        const entry = batch.entries[batch.taken]!;
        const { verdict, fd, size, at } = FileBatches.result(batch, batch.taken++);
        if (verdict === Verdict.noMatch) summary.files_scanned++;
        if (verdict === Verdict.reopen) {
          if (!(await openAndScan(entry))) return false;
          continue;
        }
        if (verdict !== Verdict.candidate) continue;
        if (fd < 0) {
          // All of it came back in the arena: scanned from the search's buffer, as a first read.
          batch.arena.copy(buffer, 0, at, at + size);
          if (!(await scanOpened({ fd, size, length: size }, entry))) return false;
          continue;
        }
        try {
          if (!(await scanOpened({ fd, size, length: undefined }, entry))) return false;
        } finally {
          closeSync(fd);
        }
      }
      batches.shift();
      return true;
    };
    const takeReady = async (all: boolean): Promise<boolean> => {
      for (let head = batches.head; head && (all || head.results || head.failure || batches.full); head = batches.head) {
        if (!(await settle(head)) || !(await take(head))) return false;
      }
      return true;
    };
    try {
      for (const entry of walk) {
        if (performance.now() > sliceEnd && !(await pause())) return;
        batches.add(entry);
        if (!(await takeReady(false))) return;
      }
      batches.submit();
      await takeReady(true);
    } finally {
      await batches.stop();
    }
  }
}

/** How often a search waiting for the thread pool looks for a disconnect and its time budget. */
export const BATCH_WAIT_CHECK_MS = 20;

/** Resolves when `promise` settles or after `ms`, whichever is first. */
function within(promise: Promise<void>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    void promise.finally(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
