import { setImmediate as nextTurn } from 'node:timers/promises';
import { describeStats } from '../entry-info.js';
import type { OwnerNames } from '../owner-names.js';
import { SEARCH_SLICE_MS, type SearchSink } from './search.js';
import { OpenDir } from './user-access.js';
import { walkTree, type WalkOptions } from './walk.js';

export type FindType = 'file' | 'dir' | 'any';

export interface FindRequest {
  root: string;
  /** ripgrep's `--files -g GLOB`: relative to the root, `**` spans directories, no slash matches a name at any depth. */
  glob: string | undefined;
  type: FindType;
  maxResults: number;
  walk: WalkOptions;
  names: OwnerNames;
}

/**
 * Opens the root (a 4xx before anything is sent); the returned function
 * streams one JSON object, `{"entries":[...],"truncated":...}`, entry by entry,
 * so envd never holds a listing of a large tree.
 */
export function prepareFind(request: FindRequest): (sink: SearchSink) => Promise<{ listed: number; truncated: boolean }> {
  const root = OpenDir.openRoot(request.root, request.walk.reader, request.walk.searchCalls);
  return async (sink) => {
    const report = { tooDeep: 0 };
    const walk = walkTree(root, { ...request.walk, include: request.glob === undefined ? [] : [request.glob] }, request.type !== 'file', report);
    let listed = 0;
    let truncated = false;
    let out = '{"entries":[';
    let sliceEnd = performance.now() + SEARCH_SLICE_MS;
    try {
      for (const entry of walk) {
        if (performance.now() > sliceEnd) {
          sink.write(out);
          out = '';
          await sink.waitForRoom();
          await nextTurn();
          if (sink.gone) return { listed, truncated: true };
          sliceEnd = performance.now() + SEARCH_SLICE_MS;
        }
        if (entry.isDir ? request.type === 'file' || (request.glob !== undefined && !entry.included) : request.type === 'dir') continue;
        const stats = entry.dir.statChild(entry.name);
        // Gone, or swapped for a symlink since its directory was listed: the walk lists no symlinks.
        if (!stats || stats.isSymbolicLink()) continue;
        if (listed === request.maxResults) {
          truncated = true;
          break;
        }
        const path = `${root.path === '/' ? '' : root.path}/${entry.rel}`;
        const info = describeStats(path, request.names, stats);
        const exact = entry.relBytes ? { path_base64: Buffer.concat([Buffer.from(`${root.path === '/' ? '' : root.path}/`), entry.relBytes]).toString('base64') } : {};
        out += `${listed === 0 ? '' : ','}${JSON.stringify({ ...info, ...exact })}`;
        listed++;
      }
      // Directories past the walk's depth were not entered: the list is not all there is.
      truncated ||= report.tooDeep > 0;
      sink.write(`${out}],"truncated":${truncated}}`);
      return { listed, truncated };
    } finally {
      walk.return();
      root.close();
    }
  };
}
