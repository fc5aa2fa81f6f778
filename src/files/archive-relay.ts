import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { availableParallelism } from 'node:os';
import type { Readable } from 'node:stream';
import { READ_AHEAD_BYTES, type ArchiveBody } from './archive-extract.js';
import { outcomeError, spliceableLength, startBodyReader, takeOverBody } from './body-takeover.js';
import { readAhead } from './read-ahead.js';

/** An archive body read through the relay; `close` ends the relay and gives the request back. */
export interface RelayedArchive extends ArchiveBody {
  close(): Promise<void>;
}

let relayPays: boolean | undefined;

/**
 * Whether hashing in the relay is faster than hashing here: the relay runs
 * on a second CPU, and hashes with the CPU's SHA extensions (~1.3 GB/s). On
 * one CPU, or without them, OpenSSL on envd's thread is faster than the
 * relay's copies and its portable code (~0.25 GB/s). The kernel lists the
 * extensions in /proc/cpuinfo ("sha_ni" on x86).
 */
function relayHashesFaster(): boolean {
  if (relayPays === undefined) {
    let flags = '';
    try {
      flags = readFileSync('/proc/cpuinfo', 'latin1');
    } catch {
      // no /proc: hash here
    }
    relayPays = availableParallelism() > 1 && /^flags\s*:.*\bsha_ni\b/m.test(flags);
  }
  return relayPays;
}

/**
 * A large archive upload's body read through the holder's --relay mode
 * (src/holder/relay.c), which passes the bytes on and hashes them on its own
 * CPU: the sha256 was a quarter of an upload's time on envd's main thread.
 * Undefined where the body cannot be taken over (see spliceableLength) or
 * where the relay would not be faster; the caller then reads the request.
 *
 * Once used, the connection cannot take another request: the caller answers
 * with `Connection: close`, and must call `close` when the extraction ended,
 * however it ended.
 */
export function relayArchive(request: IncomingMessage, holder: string): RelayedArchive | undefined {
  const length = spliceableLength(request);
  if (length === undefined || !relayHashesFaster()) return undefined;
  const taken = takeOverBody(request, length);
  const { child, outcome } = startBodyReader(holder, '--relay', length - taken.earlyBytes, taken, request.socket as Socket, 'pipe');
  // A relay that failed to start rejects `outcome`; close() and the chunks' end read it.
  outcome.catch(() => {});
  const relayed = child.stdio[4] as Readable;
  const iterator = readAhead(relayed, READ_AHEAD_BYTES);
  // Listening from now on, not from the extraction's first read: when the relay exits, Node resumes every
  // stdio stream of it (child_process's flushStdio), and what nobody listens to then is dropped.
  let first: ReturnType<typeof iterator.next> | undefined = iterator.next();
  // Handled where it is awaited; a route that refuses before reading (409) never awaits it, and close() makes it reject.
  first.catch(() => {});
  let completed = false;
  return {
    chunks: {
      async next() {
        let next;
        try {
          next = await (first ?? iterator.next());
        } catch (error) {
          // A relay that never started (EMFILE, EAGAIN: a 503) closed the pair: its spawn's error is the answer.
          throw child.pid === undefined ? await outcome.then(() => error, (spawnError: unknown) => spawnError) : error;
        } finally {
          first = undefined;
        }
        if (next.done) {
          // The relay's end says whether that was the whole body (a client that went away ends it early).
          const failure = outcomeError(await outcome);
          if (failure) throw failure;
          completed = true;
        }
        return next;
      },
    },
    async sha256() {
      const ended = await outcome;
      if (ended.kind !== 'ok' || !ended.sha256) throw new Error(`the relay ended ${ended.kind} without a hash`);
      return ended.sha256;
    },
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      relayed.destroy();
      await iterator.return(undefined);
      await outcome.catch(() => {});
      taken.handBack(completed);
    },
  };
}
