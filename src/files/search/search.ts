import { closeSync } from 'node:fs';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Pattern } from './pattern.js';
import { LITERAL_CHUNK_BYTES, REGEX_CHUNK_BYTES, scanFile, type LineMatch, type ScanOptions } from './scan.js';
import { OpenDir, openRootFile, type StartedFile } from './user-access.js';
import { walkTree, type WalkOptions } from './walk.js';

/**
 * Synchronous work between two turns of the event loop. The walk and the
 * reads are synchronous calls (a thread-pool round trip per open, read and
 * close would make a search of node_modules several times slower); slicing
 * them keeps /health and every other request answering while a search runs.
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
  /** max_results was reached, or the time budget ran out (`timed_out`). */
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
  /** Between slices: flush what was found, wait for a slow client, let the event loop run. False: stop. */
  const pause = async (): Promise<boolean> => {
    if (out !== '') sink.write(out);
    out = '';
    await sink.waitForRoom();
    await nextTurn();
    sliceEnd = performance.now() + SEARCH_SLICE_MS;
    if (performance.now() > deadline) summary.timed_out = summary.truncated = true;
    return !sink.gone && !summary.timed_out;
  };
  const search = function* (file: Omit<StartedFile, 'length'> & { length: number | undefined }, path: string, pathBytes: Buffer | undefined): Generator<void, void, undefined> {
    summary.files_scanned++;
    const where = pathBytes ? { path, path_base64: pathBytes.toString('base64') } : { path };
    const lines = yield* scanFile(file.fd, file.size, file.length, buffer, request.pattern, request.scan, (match) => {
      out += `${JSON.stringify({ type: 'match', ...where, ...match })}\n`;
      // The first match goes out at once (the rest at the end of each slice): an agent may stop reading there.
      if (summary.matches === 0) {
        sink.write(out);
        out = '';
      }
      if (++summary.matches >= request.maxResults) summary.truncated = true;
      return !summary.truncated;
    });
    if (lines > 0) summary.files_matched++;
  };
  const walk = root ? walkTree(root, request.walk, false) : undefined;
  try {
    const files = walk ?? [{ dir: undefined, name: '', rel: '', relBytes: undefined }];
    const prefix = root && root.path !== '/' ? `${root.path}/` : '/';
    for (const entry of files) {
      if (performance.now() > sliceEnd && !(await pause())) return finish();
      // A file of the walk is opened and its first chunk read in one step; the root file is read by the scan.
      const opened = entry.dir ? entry.dir.startFile(entry.name, request.walk.reader, buffer, request.scan.maxFileBytes) : file && { ...file, length: undefined };
      // Empty files have nothing to match, and /proc's and /sys's pseudo-files say size 0: some (kmsg) block a read forever.
      if (!opened || opened.size === 0 || (request.scan.maxFileBytes > 0 && opened.size > request.scan.maxFileBytes)) {
        if (opened && entry.dir && opened.fd >= 0) closeSync(opened.fd);
        continue;
      }
      try {
        const path = entry.dir ? prefix + entry.rel : request.root;
        const pathBytes = entry.relBytes && Buffer.concat([Buffer.from(prefix), entry.relBytes]);
        for (const _ of search(opened, path, pathBytes)) {
          if (performance.now() > sliceEnd && !(await pause())) return finish();
        }
      } finally {
        if (entry.dir && opened.fd >= 0) closeSync(opened.fd);
      }
      if (summary.truncated) return finish();
    }
    return finish();
  } finally {
    walk?.return();
    root?.close();
    if (file) closeSync(file.fd);
  }

  function finish(): SearchSummary {
    if (out !== '') sink.write(out);
    out = '';
    summary.elapsed_ms = Math.round(performance.now() - started);
    return summary;
  }
}
