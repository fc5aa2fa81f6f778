import type { StreamName, StreamOffsets } from '../holder/protocol.js';
import type { KeptLog } from './kept-log.js';
import type { ExitInfo } from './schemas.js';

/**
 * How far a subscriber replays the kept log: to `logEnd` (asked again as the
 * replay goes: it moves to the whole log once the command has finished), where
 * the live output (or the end) starts at `offsets` in each stream; whatever of
 * the streams lies between what the log kept and `offsets` is lost to this
 * subscriber (past the cap or the budgets). `offsets` is undefined for a holder
 * older than protocol 4.
 */
export interface ReplayTarget {
  logEnd: number;
  offsets: StreamOffsets | undefined;
}

/**
 * Someone following a command's output: a stream client or an attacher.
 * It first catches up from the kept log (`catchUp`), then gets live output
 * (`push`), then `finish`.
 */
export interface OutputSubscriber {
  /** Replays the kept log from where the subscriber starts up to `target()`, then calls `proc.caughtUp(this)`. */
  catchUp(log: KeptLog, target: () => ReplayTarget): void;
  /** Live output, including output past the cap that the log no longer keeps. */
  push(stream: StreamName, bytes: Buffer): void;
  /**
   * Live output as the holder decoded and escaped it (the inside of a JSON
   * string), valid only during the call. Its decoder carries on from where
   * the replay stopped: a character the replay left incomplete is completed
   * (or replaced) here.
   */
  pushText(stream: StreamName, json: Buffer, offset?: number): void;
  /** The last call: the command has ended and its output is complete. */
  finish(exit: ExitInfo): void;
  /**
   * The output can no longer be followed without a gap (envd lost the holder's channel): the stream
   * ends before `exit`, with an `error` event saying `message` where envd may still write to it, else cut.
   */
  abort(message: string): void;
  /** True while it holds output it could not yet write; the command is paused meanwhile. */
  readonly backedUp: boolean;
  /** The client's socket, if the holder may write this subscriber's live output to it itself. */
  lendableSocket(): LendableSocket | undefined;
  /** It sends the output's raw bytes (encoding base64): live output must come as DATA, never as the holder's TEXT. */
  readonly wantsBytes?: boolean;
  /** Writes nothing from now on; calls `flushed` once all it wrote before has gone to the socket. */
  lend(flushed: () => void): void;
  /**
   * The socket is the subscriber's to write again: all output up to here is on it (`offsets`: where it
   * stands in each stream, protocol 4), or (`intact` false) the holder vanished while writing and the
   * stream may end inside an event.
   */
  reclaim(intact: boolean, offsets?: StreamOffsets): void;
}

/** A socket of envd's process, by fd, and how its response frames a body (HTTP chunks or none). */
export interface LendableSocket {
  fd: number;
  /** Which socket the fd is now: the holder takes it only if it is still this one. */
  inode: number;
  chunked: boolean;
}
