import { describe, expect, it } from 'vitest';
import type { HolderLink } from '../../../src/commands/holder-link.js';
import type { OutputSubscriber } from '../../../src/commands/output-subscriber.js';
import { LentSocket, nextLentSocketState, type LentSocketEvent, type LentSocketState } from '../../../src/commands/states/lent-socket.js';
import { RefusedTransition } from '../../../src/commands/states/transition.js';
import type { Logger } from '../../../src/logger.js';
import { itTransitions } from './expect-table.js';

const STATES: LentSocketState[] = ['none', 'asked', 'ready', 'on', 'ending'];
const EVENTS: LentSocketEvent[] = ['ask', 'ready', 'flushed', 'askBack', 'ended', 'dropped'];

describe('the lent socket', () => {
  itTransitions(nextLentSocketState, STATES, EVENTS, {
    none: { ask: 'asked', ready: 'none', flushed: 'none', askBack: 'none', ended: 'none', dropped: 'none' },
    asked: { ready: 'ready', askBack: 'ending', ended: 'none', dropped: 'none' },
    ready: { flushed: 'on', askBack: 'ending', ended: 'none', dropped: 'none' },
    on: { askBack: 'ending', ended: 'none', dropped: 'none' },
    ending: { ready: 'ending', flushed: 'ending', askBack: 'ending', ended: 'none', dropped: 'none' },
  }, {
    'none ready': 'a DIRECT_READY that crossed LIVE_OFF',
    'none ended': 'a DIRECT_ENDED after LIVE_OFF forgot the socket',
    'none flushed': 'a flush of a lending that ended',
    'asked ask': 'one lent socket at a time',
    'ready ask': 'one lent socket at a time',
    'on ask': 'one lent socket at a time',
    'ending ask': 'one lent socket at a time',
    'asked flushed': 'GO before DIRECT_READY',
    'on flushed': 'GO twice',
    'ready ready': 'one DIRECT_READY per DIRECT_ON',
    'on ready': 'one DIRECT_READY per DIRECT_ON',
    'ending ready': 'DIRECT_READY crossed DIRECT_OFF: DIRECT_ENDED follows',
  });
});

describe('a lent socket over a link', () => {
  /** What the holder would be told, in order, and what envd logged. */
  function setUp() {
    const sent: string[] = [];
    const errors: unknown[] = [];
    const link = { directOn: () => sent.push('DIRECT_ON'), directGo: () => sent.push('GO'), directOff: () => sent.push('DIRECT_OFF'), directPing: () => sent.push('PING') } as unknown as HolderLink;
    const logger = { info: () => {}, error: (fields: unknown) => errors.push(fields) } as unknown as Logger;
    const lent = new LentSocket(() => link, logger, 42);
    let flush: (() => void) | undefined;
    const reclaimed: boolean[] = [];
    const subscriber = { lend: (flushed: () => void) => (flush = flushed), reclaim: (intact: boolean) => reclaimed.push(intact) } as unknown as OutputSubscriber;
    return { sent, errors, lent, subscriber, reclaimed, flush: () => flush!() };
  }
  const socket = { fd: 9, inode: 1, chunked: true };

  it('sends GO only once the subscriber has flushed what it wrote', () => {
    const t = setUp();
    t.lent.lend(t.subscriber, socket);
    t.lent.onReady();
    expect(t.sent).toEqual(['DIRECT_ON']);
    t.flush();
    expect(t.sent).toEqual(['DIRECT_ON', 'GO']);
    expect(t.lent.state).toBe('on');
  });

  it('sends no GO for a flush that completes after the socket was asked back', () => {
    const t = setUp();
    t.lent.lend(t.subscriber, socket);
    t.lent.onReady();
    t.lent.askBack();
    t.flush();
    expect(t.sent).toEqual(['DIRECT_ON', 'DIRECT_OFF']);
    expect(t.lent.onEnded('off', undefined, () => true)).toBe(true);
    expect(t.reclaimed).toEqual([true]);
  });

  it('logs and ignores a second DIRECT_READY from the holder instead of throwing into the link', () => {
    const t = setUp();
    t.lent.lend(t.subscriber, socket);
    t.lent.onReady();
    t.flush();
    expect(() => t.lent.onReady()).not.toThrow();
    expect(t.errors).toHaveLength(1);
    expect(t.lent.state).toBe('on');
  });

  it('refuses to lend a second socket while one is lent (a bug in envd)', () => {
    const t = setUp();
    t.lent.lend(t.subscriber, socket);
    expect(() => t.lent.lend(t.subscriber, socket)).toThrow(RefusedTransition);
  });

  it('pings only while the holder writes to the socket', () => {
    const t = setUp();
    t.lent.keepAlive();
    t.lent.lend(t.subscriber, socket);
    t.lent.keepAlive();
    t.lent.onReady();
    t.flush();
    t.lent.keepAlive();
    expect(t.sent).toEqual(['DIRECT_ON', 'GO', 'PING']);
  });

  it('hands the socket back on a dropped link, saying whether the holder may have written to it', () => {
    const t = setUp();
    t.lent.lend(t.subscriber, socket);
    expect(t.lent.drop()).toEqual({ subscriber: t.subscriber, went: false });
    t.lent.lend(t.subscriber, socket);
    t.lent.onReady();
    t.flush();
    expect(t.lent.drop()).toEqual({ subscriber: t.subscriber, went: true });
    expect(t.lent.drop()).toBeUndefined();
  });
});
