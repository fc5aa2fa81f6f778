import type { HolderLink } from '../holder-link.js';
import { nextState, type TransitionTable } from './transition.js';

/**
 * Flow control of one command's output: while any follower is catching up
 * from the log or cannot write, the holder's messages are held, so the holder
 * stops reading the command's pipes and the command blocks on write: envd
 * holds no output.
 * - unlinked: no live channel to hold;
 * - flowing: messages are delivered as they come;
 * - held: messages wait in the link (and behind it, in the holder and the command).
 */
export type FlowState = 'unlinked' | 'flowing' | 'held';
/** linked: a new link (it starts delivering). behind / clear: whether anyone is behind now. unlinked: the link went. */
export type FlowEvent = 'linked' | 'behind' | 'clear' | 'unlinked';

/** A second link while one is attached must not happen: the old one would go on delivering unheld. */
export const FLOW_TRANSITIONS: TransitionTable<FlowState, FlowEvent> = {
  unlinked: { linked: 'flowing', behind: 'unlinked', clear: 'unlinked', unlinked: 'unlinked' },
  flowing: { behind: 'held', clear: 'flowing', unlinked: 'unlinked' },
  held: { behind: 'held', clear: 'flowing', unlinked: 'unlinked' },
};

export function nextFlowState(state: FlowState, event: FlowEvent): FlowState {
  return nextState('flow control', FLOW_TRANSITIONS, state, event);
}

/** Holds and releases one command's link as its followers fall behind and catch up. */
export class FlowControl {
  private current: FlowState = 'unlinked';
  private link: HolderLink | undefined;

  get state(): FlowState {
    return this.current;
  }

  attach(link: HolderLink): void {
    this.current = nextFlowState(this.current, 'linked');
    this.link = link;
  }

  detach(): void {
    this.current = nextFlowState(this.current, 'unlinked');
    this.link = undefined;
  }

  /** Holds the link while anyone is behind, releases it once nobody is. */
  update(behind: boolean): void {
    this.current = nextFlowState(this.current, behind ? 'behind' : 'clear');
    if (this.current === 'held') this.link!.hold();
    else this.link?.release();
  }
}
