import { describe } from 'vitest';
import { nextFeedState, nextSubscriberState, type FeedEvent, type FeedState, type SubscriberEvent, type SubscriberState } from '../../../src/commands/states/subscribers.js';
import { itTransitions } from './expect-table.js';

describe('a subscriber', () => {
  const states: SubscriberState[] = ['syncing', 'replaying', 'live', 'done'];
  const events: SubscriberEvent[] = ['replay', 'caughtUp', 'ended', 'finish'];
  itTransitions(nextSubscriberState, states, events, {
    syncing: { replay: 'replaying', ended: 'replaying' },
    replaying: { caughtUp: 'live', ended: 'replaying', finish: 'done' },
    live: { ended: 'done' },
    done: {},
  }, {
    'syncing ended': 'replays the whole log of the finished command',
    'replaying ended': 'its target becomes the whole log',
    'syncing caughtUp': 'nothing was replayed',
    'live replay': 'a live follower never replays again',
    'live caughtUp': 'caught up once',
    'done ended': 'finished once',
  });
});

describe('the live feed', () => {
  const states: FeedState[] = ['off', 'syncing', 'on'];
  const events: FeedEvent[] = ['follow', 'sync', 'lastLeft', 'lost'];
  itTransitions(nextFeedState, states, events, {
    off: { follow: 'syncing', sync: 'off', lost: 'off' },
    syncing: { follow: 'syncing', sync: 'on', lastLeft: 'off', lost: 'off' },
    on: { follow: 'on', sync: 'on', lastLeft: 'off', lost: 'off' },
  }, {
    'off sync': 'a SYNC that crossed LIVE off',
    'off lastLeft': 'nobody followed',
    'on sync': 'the switch to DATA for a bytes subscriber',
  });
});
