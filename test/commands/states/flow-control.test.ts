import { describe } from 'vitest';
import { nextFlowState, type FlowEvent, type FlowState } from '../../../src/commands/states/flow-control.js';
import { itTransitions } from './expect-table.js';

describe('flow control', () => {
  const states: FlowState[] = ['unlinked', 'flowing', 'held'];
  const events: FlowEvent[] = ['linked', 'behind', 'clear', 'unlinked'];
  itTransitions(nextFlowState, states, events, {
    unlinked: { linked: 'flowing', behind: 'unlinked', clear: 'unlinked', unlinked: 'unlinked' },
    flowing: { behind: 'held', clear: 'flowing', unlinked: 'unlinked' },
    held: { behind: 'held', clear: 'flowing', unlinked: 'unlinked' },
  }, {
    'unlinked behind': 'nothing to hold without a link',
    'flowing linked': 'a second link while one is attached',
    'held linked': 'a second link while one is attached',
  });
});
