import { expect, it } from 'vitest';
import { RefusedTransition } from '../../../src/commands/states/transition.js';

/**
 * One test per (state, event) of a machine: the event either moves the state where `expected`
 * says, or (no entry) is refused. `expected` is written out in each test file, apart from the
 * table in src/, so a changed transition fails here until someone says it should.
 */
export function itTransitions<S extends string, E extends string>(
  next: (state: S, event: E) => S,
  states: readonly S[],
  events: readonly E[],
  expected: Record<S, Partial<Record<E, S>>>,
  why: Partial<Record<`${S} ${E}`, string>> = {},
): void {
  for (const state of states) {
    for (const event of events) {
      const to = expected[state][event];
      const reason = why[`${state} ${event}` as `${S} ${E}`];
      if (to === undefined) {
        it(`refuses ${event} in ${state}${reason ? ` (${reason})` : ''}`, () => {
          expect(() => next(state, event)).toThrow(RefusedTransition);
          expect(() => next(state, event)).toThrow(`${event} must not happen in state ${state}`);
        });
      } else {
        it(`${event} in ${state} goes to ${to}${reason ? ` (${reason})` : ''}`, () => {
          expect(next(state, event)).toBe(to);
        });
      }
    }
  }
}
