import type { StreamOffsets } from '../holder/protocol.js';
import type { Logger } from '../logger.js';
import type { HolderLink } from './holder-link.js';
import type { KeptLog } from './kept-log.js';
import type { OutputSubscriber, ReplayTarget } from './output-subscriber.js';
import type { ExitInfo } from './schemas.js';
import { FlowControl } from './states/flow-control.js';
import { LentSocket } from './states/lent-socket.js';
import { Subscribers } from './states/subscribers.js';

/** The holder's messages that carry output or say where it is (not EXIT, not REAPED). */
export type FeedMessage = Extract<Parameters<HolderLink['onMessage']>[0], { type: 'sync' | 'data' | 'text' | 'direct-ready' | 'direct-ended' }>;

/** How a finished command's followers end: its exit, and where a replay of its whole output ends. */
export interface FeedEnd {
  exit: ExitInfo;
  target: () => ReplayTarget;
}

/**
 * Everyone following one command's output, over its holder's live channel. It composes three state
 * machines (src/commands/states/): each follower's state and the LIVE feed they share, the lent
 * socket, and flow control (the holder's messages wait while anyone is behind).
 */
export class OutputFeed {
  private readonly subscribers = new Subscribers();
  private readonly lent: LentSocket;
  private readonly flow = new FlowControl();
  private link: HolderLink | undefined;
  /** Where the kept log ends as far as the holder has said (HELLO, SYNC, each message). */
  logEnd: number;
  /** How far each stream's output has gone out as TEXT up to logEnd (protocol 4). */
  private liveOffsets: StreamOffsets | undefined;
  /** LIVE on asked the holder for TEXT (false: DATA, which a bytes subscriber needs and every subscriber can decode). */
  private liveText = false;
  private end: FeedEnd | undefined;

  constructor(
    private readonly log: KeptLog,
    logger: Logger,
    pid: number,
    logEnd: number,
  ) {
    this.logEnd = logEnd;
    this.lent = new LentSocket(() => this.link, logger, pid);
  }

  get size(): number {
    return this.subscribers.size;
  }

  /** A (new) link: subscribers waiting for live output get it from here. */
  attach(link: HolderLink): void {
    this.link = link;
    this.flow.attach(link);
    if (this.subscribers.feed === 'syncing') this.liveOn();
  }

  subscribe(subscriber: OutputSubscriber): void {
    if (this.end) {
      this.subscribers.add(subscriber, 'replaying');
      subscriber.catchUp(this.log, this.end.target);
      return;
    }
    this.subscribers.add(subscriber, 'syncing');
    const feed = this.subscribers.feed;
    this.subscribers.moveFeed('follow');
    if (feed === 'off') this.liveOn();
    // Output may be on the lent socket past logEnd: the replay starts where DIRECT_ENDED says it is.
    else if (this.lent.busy) this.lent.askBack();
    // TEXT cannot give back the bytes: DATA from the next SYNC on, where this subscriber's replay ends.
    else if (subscriber.wantsBytes && this.liveText) this.liveOn();
    // Between two messages: everything up to logEnd is in the log, everything after comes live.
    else if (feed === 'on') this.startReplay(subscriber, { logEnd: this.logEnd, offsets: this.liveOffsets && { ...this.liveOffsets } });
  }

  unsubscribe(subscriber: OutputSubscriber): void {
    if (!this.subscribers.remove(subscriber)) return;
    if (this.subscribers.size === 0 && this.subscribers.feed !== 'off') {
      // LIVE_OFF takes a lent socket back too, without a DIRECT_ENDED.
      this.subscribers.moveFeed('lastLeft');
      this.lent.drop();
      this.link?.liveOff();
    } else if (this.lent.isLentTo(subscriber)) {
      this.lent.askBack();
    }
    this.updateFlow();
    this.lendIfAlone();
  }

  /** A subscriber has replayed the log: it follows live output from here (or ends, if the command has). */
  caughtUp(subscriber: OutputSubscriber): void {
    if (!this.subscribers.has(subscriber)) return;
    if (this.end) {
      this.subscribers.move(subscriber, 'finish');
      subscriber.finish(this.end.exit);
      return;
    }
    this.subscribers.move(subscriber, 'caughtUp');
    this.updateFlow();
    this.lendIfAlone();
  }

  keepLentSocketAlive(): void {
    this.lent.keepAlive();
  }

  /** Hold the holder's messages while anyone is catching up or cannot write. */
  updateFlow(): void {
    this.flow.update(this.subscribers.anyoneBehind());
  }

  onMessage(message: FeedMessage): void {
    switch (message.type) {
      case 'sync':
        this.logEnd = message.logEnd;
        this.liveOffsets = message.offsets;
        if (this.subscribers.moveFeed('sync') === 'off') return;
        // A SYNC of TEXT: one who wants bytes waits for the SYNC of the DATA asked for since.
        for (const subscriber of this.subscribers.inState('syncing')) {
          if (!(subscriber.wantsBytes && this.liveText)) this.startReplay(subscriber, { logEnd: message.logEnd, offsets: message.offsets && { ...message.offsets } });
        }
        return;
      case 'data':
      case 'text':
        this.logEnd = message.logEnd;
        if (message.type === 'text' && message.offset !== undefined && this.liveOffsets) this.liveOffsets[message.stream] = message.offset;
        if (this.subscribers.feed !== 'on') return;
        for (const [subscriber, state] of this.subscribers.entries()) {
          if (state !== 'live') continue;
          if (message.type === 'data') subscriber.push(message.stream, message.bytes);
          else subscriber.pushText(message.stream, message.json, message.offset);
        }
        this.updateFlow();
        return;
      case 'direct-ready':
        this.lent.onReady();
        return;
      case 'direct-ended':
        this.onDirectEnded(message);
        return;
    }
  }

  /**
   * The link was lost while the holder runs on: whoever followed the output over it cannot be
   * continued without a gap, so their streams end with `message` and they attach again.
   */
  linkLost(message: string): void {
    this.link = undefined;
    this.flow.detach();
    this.lent.drop();
    this.subscribers.moveFeed('lost');
    for (const subscriber of [...this.subscribers.keys()]) subscriber.abort(message);
    this.subscribers.clear();
  }

  /** The holder is gone: the holder's copy of a lent socket closed with it; output it did not write is in the log. */
  linkGone(): void {
    this.link = undefined;
    this.flow.detach();
    const reclaimed = this.lent.drop();
    if (reclaimed && this.subscribers.has(reclaimed.subscriber)) reclaimed.subscriber.reclaim(!reclaimed.went);
  }

  /** The command ended: followers live finish, those syncing replay the whole log, those replaying finish when caught up. */
  ended(end: FeedEnd): void {
    this.end = end;
    for (const [subscriber, state] of [...this.subscribers.entries()]) {
      if (state === 'replaying') continue;
      this.subscribers.move(subscriber, 'ended');
      if (state === 'live') subscriber.finish(end.exit);
      else subscriber.catchUp(this.log, end.target);
    }
  }

  /**
   * LIVE on (again), in TEXT unless a subscriber wants raw bytes. Asked again while on, the holder
   * switches to DATA at its SYNC: subscribers following live decode DATA themselves from there (a
   * character split exactly there may come out as U+FFFD), subscribers still syncing replay up to it.
   */
  private liveOn(): void {
    const link = this.link;
    if (!link) return;
    this.liveText = !this.subscribers.anyoneWantsBytes() && link.speaksText;
    link.liveOn(this.liveText);
  }

  /**
   * One caught-up subscriber alone: its socket is lent to the holder, which writes the live output
   * to it directly (two kernel copies and envd's event loop fewer per event). Not while anyone
   * else follows the command: they get TEXT, and one writer per socket is the rule.
   */
  private lendIfAlone(): void {
    if (this.lent.busy || this.lent.refused || this.subscribers.feed !== 'on' || !this.liveText || this.subscribers.size !== 1) return;
    const link = this.link;
    if (!link || link.closed || !link.lendsSockets) return;
    const [subscriber, state] = this.subscribers.entries().next().value!;
    const socket = state === 'live' ? subscriber.lendableSocket() : undefined;
    if (socket) this.lent.lend(subscriber, socket);
  }

  /** DIRECT_ENDED: the socket is back; newcomers replay from where it says the output is. */
  private onDirectEnded({ logEnd, reason, offsets }: Extract<FeedMessage, { type: 'direct-ended' }>): void {
    if (!this.lent.onEnded(reason, offsets, (subscriber) => this.subscribers.has(subscriber))) return;
    this.logEnd = logEnd;
    this.liveOffsets = offsets;
    // The holder is back to TEXT: one who wants bytes waits for the SYNC of DATA.
    if (this.subscribers.anyoneWantsBytes('syncing')) this.liveOn();
    else for (const subscriber of this.subscribers.inState('syncing')) this.startReplay(subscriber, { logEnd, offsets: offsets && { ...offsets } });
    this.updateFlow();
    // A client that failed is about to go ('close' follows): it is not asked again. Anyone else alone may be.
    if (reason !== 'failed') this.lendIfAlone();
  }

  private startReplay(subscriber: OutputSubscriber, upTo: ReplayTarget): void {
    this.subscribers.move(subscriber, 'replay');
    this.updateFlow();
    // Once the command has finished the target becomes the whole log, even mid-replay.
    subscriber.catchUp(this.log, () => (this.end ? this.end.target() : upTo));
  }
}
