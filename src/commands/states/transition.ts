/**
 * The one rule every state machine of a tracked command follows: its states
 * and the events that move them are a table, read by `nextState`. An event
 * with no entry in the table for the current state must not happen (a bug in
 * envd, not a race of the holder: the tables spell out the late messages a
 * race may bring as entries that keep the state), so it throws.
 */
export type TransitionTable<State extends string, Event extends string> = Record<State, Partial<Record<Event, State>>>;

export class RefusedTransition extends Error {
  constructor(machine: string, state: string, event: string) {
    super(`${machine}: ${event} must not happen in state ${state}`);
    this.name = 'RefusedTransition';
  }
}

/** The state after `event` in `state`, or a RefusedTransition for an event that must not happen there. */
export function nextState<State extends string, Event extends string>(machine: string, table: TransitionTable<State, Event>, state: State, event: Event): State {
  const next = table[state][event];
  if (next === undefined) throw new RefusedTransition(machine, state, event);
  return next;
}

/** Whether the table allows `event` in `state` (for a caller that checks before it acts). */
export function allows<State extends string, Event extends string>(table: TransitionTable<State, Event>, state: State, event: Event): boolean {
  return table[state][event] !== undefined;
}
