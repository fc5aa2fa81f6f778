import { setFlagsFromString } from 'node:v8';

/**
 * Starts V8's incremental marking later: when 90 % of the old generation's
 * room up to its limit is used (and at once only at 100 %), instead of V8's
 * default early start. Once one collection has run mid-transfer (an archive
 * upload after a download, say), V8 sets each next limit barely above what
 * survived, and with the default triggers it then marked and compacted ~40 ms
 * apart: 8–10 mark-compacts per 200 MiB archive upload, whose helper threads
 * took the second CPU from the upload's relay and its client (the upload cost
 * envd 620–710 ms of CPU instead of 340–520; docs/performance.md). The limits
 * themselves are unchanged, so memory is not: envd's RSS growth measured the
 * same. Set once envd listens, not as a start-up flag: as a flag it made the
 * start 40 ms slower (the bundle's evaluation allocates in bursts).
 */
export function paceCollectorForTransfers(): void {
  setFlagsFromString('--incremental-marking-soft-trigger=90');
  setFlagsFromString('--incremental-marking-hard-trigger=100');
}
