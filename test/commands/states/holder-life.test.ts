import { describe } from 'vitest';
import { nextHolderLifeState, type HolderLifeEvent, type HolderLifeState } from '../../../src/commands/states/holder-life.js';
import { itTransitions } from './expect-table.js';

describe("a holder's life", () => {
  const states: HolderLifeState[] = ['unreached', 'linked', 'ending', 'ended'];
  const events: HolderLifeEvent[] = ['attached', 'exit', 'lost', 'gone', 'completed'];
  itTransitions(nextHolderLifeState, states, events, {
    unreached: { attached: 'linked', gone: 'ending' },
    linked: { exit: 'ending', lost: 'unreached', gone: 'ending' },
    ending: { gone: 'ending', completed: 'ended' },
    ended: { gone: 'ended' },
  }, {
    'unreached gone': 'its pid record says it is gone: the status file says how it ended',
    'linked gone': 'killed without an EXIT, or forgotten',
    'ending gone': 'the link closes after EXIT: its end, not a loss',
    'unreached exit': 'EXIT comes only over a link',
    'ending exit': 'one EXIT',
    'linked attached': 'one link at a time',
    'ending attached': 'a reconnect that arrives after the end',
    'ended lost': 'a loss after the end is no loss',
    'linked completed': 'the end is read only once under way',
  });
});
