import type { DirectEndReason, StreamOffsets } from '../../holder/protocol.js';
import type { Logger } from '../../logger.js';
import type { HolderLink } from '../holder-link.js';
import type { LendableSocket, OutputSubscriber } from '../output-subscriber.js';
import { allows, nextState, type TransitionTable } from './transition.js';

/**
 * A stream client's socket lent to the holder, which then writes the live
 * output to it itself (direct output, docs/holder-protocol.md):
 * - none: envd writes to every socket;
 * - asked: DIRECT_ON sent; TEXT still comes, the subscriber still writes;
 * - ready: DIRECT_READY came; the subscriber flushes what it wrote, then GO;
 * - on: GO sent; only the holder writes to the socket;
 * - ending: asked back (DIRECT_OFF); DIRECT_ENDED is to come.
 */
export type LentSocketState = 'none' | 'asked' | 'ready' | 'on' | 'ending';
/**
 * ask: envd lends a socket. ready: DIRECT_READY. flushed: the subscriber's own writes are out (GO goes).
 * askBack: envd wants it back. ended: DIRECT_ENDED. dropped: LIVE_OFF or the link's end took it back silently.
 */
export type LentSocketEvent = 'ask' | 'ready' | 'flushed' | 'askBack' | 'ended' | 'dropped';

/**
 * One lent socket at a time. Entries that keep the state are late messages a race brings: a
 * DIRECT_READY or a flush after the socket was asked back (DIRECT_ENDED follows), a DIRECT_ENDED
 * after LIVE_OFF forgot the socket. Missing entries must not happen: a second lend, GO twice, GO
 * before DIRECT_READY.
 */
export const LENT_SOCKET_TRANSITIONS: TransitionTable<LentSocketState, LentSocketEvent> = {
  none: { ask: 'asked', ready: 'none', flushed: 'none', askBack: 'none', ended: 'none', dropped: 'none' },
  asked: { ready: 'ready', askBack: 'ending', ended: 'none', dropped: 'none' },
  ready: { flushed: 'on', askBack: 'ending', ended: 'none', dropped: 'none' },
  on: { askBack: 'ending', ended: 'none', dropped: 'none' },
  ending: { ready: 'ending', flushed: 'ending', askBack: 'ending', ended: 'none', dropped: 'none' },
};

export function nextLentSocketState(state: LentSocketState, event: LentSocketEvent): LentSocketState {
  return nextState('lent socket', LENT_SOCKET_TRANSITIONS, state, event);
}

/** Given back: to whom, and whether the holder may have written to the socket (GO was sent). */
export interface Reclaimed {
  subscriber: OutputSubscriber;
  went: boolean;
}

/**
 * The lent socket of one command. It sends the holder DIRECT_ON/GO/OFF/PING over the link it is
 * given and tells the subscriber when to stop and start writing; who may be lent a socket, and
 * when, is the composition's call (TrackedProcess.lendIfAlone).
 */
export class LentSocket {
  private current: LentSocketState = 'none';
  private subscriber: OutputSubscriber | undefined;
  /** GO was sent in this lending: the holder may have written to the socket. */
  private went = false;
  /** Counts lendings, so a flush that completes after its lending ended changes nothing. */
  private lending = 0;
  /** The holder could not take a socket once (not allowed to, e.g. envd runs unprivileged): not asked again. */
  refused = false;

  constructor(
    private readonly link: () => HolderLink | undefined,
    private readonly logger: Logger,
    private readonly pid: number,
  ) {}

  get state(): LentSocketState {
    return this.current;
  }

  /** A socket is lent, or asked for, or on its way back. */
  get busy(): boolean {
    return this.current !== 'none';
  }

  isLentTo(subscriber: OutputSubscriber): boolean {
    return this.current !== 'none' && this.subscriber === subscriber;
  }

  /** DIRECT_ON: asks the holder to take `socket`, the socket of `subscriber`. */
  lend(subscriber: OutputSubscriber, socket: LendableSocket): void {
    this.current = nextLentSocketState(this.current, 'ask');
    this.subscriber = subscriber;
    this.went = false;
    this.lending++;
    this.link()?.directOn(socket.fd, socket.inode, socket.chunked);
  }

  /** Asks for the socket back (DIRECT_OFF); DIRECT_ENDED, always answered, gives it back. */
  askBack(): void {
    const from = this.current;
    this.current = nextLentSocketState(from, 'askBack');
    if (from !== 'none' && from !== 'ending') this.link()?.directOff();
  }

  /** DIRECT_READY: the subscriber stops writing; once what it wrote is out, GO. */
  onReady(): void {
    if (!this.fromHolder('ready')) return;
    const from = this.current;
    this.current = nextLentSocketState(from, 'ready');
    if (from !== 'asked') return; // asked back meanwhile: DIRECT_ENDED follows
    const lending = this.lending;
    this.subscriber!.lend(() => {
      if (this.lending !== lending) return;
      const before = this.current;
      this.current = nextLentSocketState(before, 'flushed');
      if (before !== 'ready') return;
      this.went = true;
      this.link()?.directGo();
    });
  }

  /** DIRECT_ENDED: the socket is the subscriber's again (undefined: LIVE_OFF forgot it first). */
  onEnded(reason: DirectEndReason, offsets: StreamOffsets | undefined, stillFollowing: (subscriber: OutputSubscriber) => boolean): boolean {
    if (!this.fromHolder('ended')) return false;
    const from = this.current;
    this.current = nextLentSocketState(from, 'ended');
    if (from === 'none') return false;
    const subscriber = this.subscriber!;
    this.subscriber = undefined;
    if (reason === 'refused') {
      this.refused = true;
      this.logger.info({ pid: this.pid }, 'the holder could not take the stream socket: envd writes the output');
    }
    if (stillFollowing(subscriber)) subscriber.reclaim(true, offsets);
    return true;
  }

  /** LIVE_OFF or the end of the link took the socket back without a DIRECT_ENDED. */
  drop(): Reclaimed | undefined {
    const from = this.current;
    this.current = nextLentSocketState(from, 'dropped');
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    return from === 'none' || !subscriber ? undefined : { subscriber, went: this.went };
  }

  /** envd's keep-alive for a lent socket, which only the holder may write to now. */
  keepAlive(): void {
    if (this.current === 'on') this.link()?.directPing();
  }

  /** A message of the holder that the table does not allow here is its bug, not envd's: logged, ignored. */
  private fromHolder(event: LentSocketEvent): boolean {
    if (allows(LENT_SOCKET_TRANSITIONS, this.current, event)) return true;
    this.logger.error({ pid: this.pid, state: this.current, event }, 'the holder sent a direct-output message out of turn: ignored');
    return false;
  }
}
