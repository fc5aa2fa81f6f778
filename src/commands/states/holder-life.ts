import { join } from 'node:path';
import type { Logger } from '../../logger.js';
import { HolderLink } from '../holder-link.js';
import { nextState, type TransitionTable } from './transition.js';

/**
 * How envd follows a command's holder over its life:
 * - unreached: no link (never reached, or lost while the holder lives on): envd reconnects with back-off;
 * - linked: the live channel is up;
 * - ending: the command has ended, from the holder's EXIT or (the holder gone without one) its status
 *   file, and envd is reading how; the link closing now is the holder's end, not a loss;
 * - ended: how the command ended is known and final.
 */
export type HolderLifeState = 'unreached' | 'linked' | 'ending' | 'ended';
/**
 * attached: a link (the first, or a reconnect). exit: the holder's EXIT. lost: the link closed while the
 * holder lives on. gone: the holder is gone (its link closed, or its pid record says so). completed:
 * the end is read.
 */
export type HolderLifeEvent = 'attached' | 'exit' | 'lost' | 'gone' | 'completed';

/**
 * A link attaches only to an unreached holder; EXIT and a loss come only over a link; the end is
 * completed only once it is under way. `gone` may come again while ending (the link closes after
 * EXIT) and after the end: it changes nothing then.
 */
export const HOLDER_LIFE_TRANSITIONS: TransitionTable<HolderLifeState, HolderLifeEvent> = {
  unreached: { attached: 'linked', gone: 'ending' },
  linked: { exit: 'ending', lost: 'unreached', gone: 'ending' },
  ending: { gone: 'ending', completed: 'ended' },
  ended: { gone: 'ended' },
};

export function nextHolderLifeState(state: HolderLifeState, event: HolderLifeEvent): HolderLifeState {
  return nextState('holder link', HOLDER_LIFE_TRANSITIONS, state, event);
}

/** One holder's life as envd sees it, and the link while there is one. */
export class HolderLife {
  private current: HolderLifeState = 'unreached';
  link: HolderLink | undefined;

  get state(): HolderLifeState {
    return this.current;
  }

  attach(link: HolderLink): void {
    this.current = nextHolderLifeState(this.current, 'attached');
    this.link = link;
  }

  /** Moves on `event`; true when this event began the command's ending (the end is to be read now). */
  on(event: Exclude<HolderLifeEvent, 'attached'>): boolean {
    const from = this.current;
    this.current = nextHolderLifeState(from, event);
    if (event === 'lost') this.link = undefined;
    return from !== 'ending' && from !== 'ended' && this.current === 'ending';
  }

  /**
   * Closes the link and resolves once the holder is gone (envd forgets the command: its directory must
   * not be removed while the holder lives). Without a link, its pid record is all there is to wait on.
   */
  async closeAndWait(holderAlive: () => boolean): Promise<void> {
    const link = this.link;
    if (!link || link.closed) {
      for (const deadline = Date.now() + HOLDER_EXIT_WAIT_MS; holderAlive() && Date.now() < deadline; ) await new Promise((resolve) => setTimeout(resolve, 20));
      return;
    }
    const gone = new Promise<void>((resolve) => {
      const previous = link.onClose;
      link.onClose = () => {
        previous();
        resolve();
      };
    });
    link.close();
    await gone;
  }

  /** Closes the link without following its end: the holder is handed over to the next envd. */
  abandon(): void {
    if (!this.link) return;
    this.link.onClose = () => {};
    this.link.close();
  }

  /** The link closed: lost if the holder lives on and envd still follows it, else gone. Returns the event it was. */
  linkClosed(holderLivesOn: boolean): 'lost' | 'gone' {
    this.link = undefined;
    return this.current === 'linked' && holderLivesOn ? 'lost' : 'gone';
  }
}

/** How long forgetting a command waits for a holder without a link to be gone after SIGKILL. */
const HOLDER_EXIT_WAIT_MS = 5_000;

/**
 * How long a reconnect waits for the holder's HELLO. Short: a holder that does
 * not answer (stopped, or its backlog full) is retried, never taken for gone.
 */
export const RECONNECT_HELLO_TIMEOUT_MS = 2_000;
/** Back-off between reconnects to a live holder that did not answer: from the first to the last. */
export const RECONNECT_BACKOFF_MS = { first: 100, max: 5_000 } as const;

export interface ReconnectTarget {
  dir: string;
  pid: number;
  logger: Logger;
  /** Still unreached, and envd still follows it (not released, not handed over). */
  wanted(): boolean;
  holderAlive(): boolean;
  /** The holder is gone: the command has ended. */
  gone(): Promise<void>;
  attach(link: HolderLink, hello: { reaped: boolean; logEnd: number }): void;
}

/**
 * For a command whose holder did not answer: keeps trying, with back-off, for
 * as long as the holder lives; once it is gone, the command has ended and its
 * status file says how. Meanwhile the command is listed as running.
 */
export async function reconnectWhileAlive(target: ReconnectTarget): Promise<void> {
  for (let delay: number = RECONNECT_BACKOFF_MS.first; ; delay = Math.min(delay * 2, RECONNECT_BACKOFF_MS.max)) {
    if (!target.wanted()) return;
    if (!target.holderAlive()) return target.gone();
    try {
      const { link, hello } = await HolderLink.connect(join(target.dir, 'sock'), RECONNECT_HELLO_TIMEOUT_MS);
      if (!target.wanted()) return link.close();
      target.attach(link, hello);
      target.logger.info({ pid: target.pid }, 'reached the holder of a command again');
      return;
    } catch (error) {
      target.logger.warn({ err: error, pid: target.pid, retryMs: delay }, 'the holder of a command is alive but did not answer: retrying');
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}
