import type { OutputSubscriber } from '../output-subscriber.js';
import { nextState, type TransitionTable } from './transition.js';

/**
 * One follower of a command's output:
 * - syncing: waits for the holder's SYNC (or DIRECT_ENDED) to say where the log ends and live output begins;
 * - replaying: catches up from the kept log up to there (up to the whole log once the command has ended);
 * - live: gets the holder's output as it comes;
 * - done: has had its `finish` (no longer followed).
 */
export type SubscriberState = 'syncing' | 'replaying' | 'live' | 'done';
/** replay: where live output begins is known. caughtUp: the replay reached it. ended: the command ended. finish: caught up with the end. */
export type SubscriberEvent = 'replay' | 'caughtUp' | 'ended' | 'finish';

export const SUBSCRIBER_TRANSITIONS: TransitionTable<SubscriberState, SubscriberEvent> = {
  syncing: { replay: 'replaying', ended: 'replaying' },
  // Ended mid-replay: the replay's target becomes the whole log, and it finishes when it gets there.
  replaying: { caughtUp: 'live', ended: 'replaying', finish: 'done' },
  live: { ended: 'done' },
  done: {},
};

export function nextSubscriberState(state: SubscriberState, event: SubscriberEvent): SubscriberState {
  return nextState('subscriber', SUBSCRIBER_TRANSITIONS, state, event);
}

/**
 * The holder's live channel as the followers need it (LIVE on/off):
 * - off: nobody follows; the holder sends no output;
 * - syncing: LIVE on was sent; its SYNC has not come;
 * - on: output comes, each message after the SYNC that says where the log stood.
 */
export type FeedState = 'off' | 'syncing' | 'on';
/** follow: a subscriber comes. sync: a SYNC came. lastLeft: the last subscriber left (LIVE off). lost: the link was lost. */
export type FeedEvent = 'follow' | 'sync' | 'lastLeft' | 'lost';

export const FEED_TRANSITIONS: TransitionTable<FeedState, FeedEvent> = {
  // A SYNC after LIVE off crossed it on the way: ignored.
  off: { follow: 'syncing', sync: 'off', lost: 'off' },
  syncing: { follow: 'syncing', sync: 'on', lastLeft: 'off', lost: 'off' },
  // A SYNC while on: the switch to DATA that a subscriber who wants bytes asked for.
  on: { follow: 'on', sync: 'on', lastLeft: 'off', lost: 'off' },
};

export function nextFeedState(state: FeedState, event: FeedEvent): FeedState {
  return nextState('live feed', FEED_TRANSITIONS, state, event);
}

/** Who follows a command, each in its state, and the feed they share. */
export class Subscribers {
  private readonly states = new Map<OutputSubscriber, SubscriberState>();
  feed: FeedState = 'off';

  get size(): number {
    return this.states.size;
  }

  has(subscriber: OutputSubscriber): boolean {
    return this.states.has(subscriber);
  }

  stateOf(subscriber: OutputSubscriber): SubscriberState | undefined {
    return this.states.get(subscriber);
  }

  /** A new follower: of a running command it syncs first, of a finished one it replays the whole log. */
  add(subscriber: OutputSubscriber, state: 'syncing' | 'replaying'): void {
    this.states.set(subscriber, state);
  }

  remove(subscriber: OutputSubscriber): boolean {
    return this.states.delete(subscriber);
  }

  /** Moves one follower; one that is done is no longer followed. Returns its new state. */
  move(subscriber: OutputSubscriber, event: SubscriberEvent): SubscriberState {
    const next = nextSubscriberState(this.states.get(subscriber)!, event);
    if (next === 'done') this.states.delete(subscriber);
    else this.states.set(subscriber, next);
    return next;
  }

  moveFeed(event: FeedEvent): FeedState {
    return (this.feed = nextFeedState(this.feed, event));
  }

  /** Every follower in `state`, as a list (moving one while iterating the map would skip or repeat). */
  inState(state: SubscriberState): OutputSubscriber[] {
    const found: OutputSubscriber[] = [];
    for (const [subscriber, s] of this.states) if (s === state) found.push(subscriber);
    return found;
  }

  entries(): IterableIterator<[OutputSubscriber, SubscriberState]> {
    return this.states.entries();
  }

  keys(): IterableIterator<OutputSubscriber> {
    return this.states.keys();
  }

  /** Forgets everyone (the link was lost: their streams were ended). */
  clear(): void {
    this.states.clear();
  }

  /** Anyone catching up from the log, or following live but unable to write: the holder's messages wait. */
  anyoneBehind(): boolean {
    for (const [subscriber, state] of this.states) if (state === 'replaying' || (state === 'live' && subscriber.backedUp)) return true;
    return false;
  }

  anyoneWantsBytes(state?: SubscriberState): boolean {
    for (const [subscriber, s] of this.states) if (subscriber.wantsBytes && (state === undefined || s === state)) return true;
    return false;
  }
}
