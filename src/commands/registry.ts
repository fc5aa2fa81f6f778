import type { Config } from '../config.js';
import type { Logger } from '../logger.js';

/** The processes envd started and still tracks, by OS pid. (Filled in by the command group.) */
export class ProcessRegistry {
  constructor(
    readonly config: Config,
    readonly log: Logger,
  ) {}

  get size(): number {
    return 0;
  }

  async killAll(): Promise<void> {}
}
