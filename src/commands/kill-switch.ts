import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../logger.js';
import { monotonicMs } from './meta.js';

/**
 * Why envd ended a command, recorded before the kill it explains: a marker
 * file in the command's directory (`killed`, `timed_out`), so that an envd
 * restarted meanwhile reports the same reason, and the command's deadline.
 */
export class KillSwitch {
  /** Its deadline passed and it was killed for it. */
  timedOut = false;
  /** A request killed it (DELETE, or the client of a foreground command or stream gone). */
  killedOnRequest = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly dir: string,
    private readonly pid: number,
    private readonly logger: Logger,
    /** Kills the command's tree, recording nothing. */
    private readonly killTree: () => void,
  ) {}

  /** A running command killed on request is recorded as killed (unless its timeout did it). */
  recordKill(): void {
    if (this.timedOut || this.killedOnRequest) return;
    this.killedOnRequest = true;
    this.mark('killed', 'could not record the kill');
  }

  /** Kills the command at `deadlineMs` (monotonic) if `running()` then, recording the timeout first. */
  arm(deadlineMs: number, running: () => boolean): void {
    const fire = () => {
      if (!running()) return;
      this.timedOut = true;
      this.mark('timed_out', 'could not record the timeout');
      this.logger.info({ pid: this.pid }, 'command timed out: killing its process tree');
      this.killTree();
    };
    this.timer = setTimeout(fire, Math.max(0, deadlineMs - monotonicMs()));
  }

  disarm(): void {
    clearTimeout(this.timer);
  }

  private mark(name: 'killed' | 'timed_out', failed: string): void {
    try {
      writeFileSync(join(this.dir, name), '', { mode: 0o600 });
    } catch (error) {
      this.logger.warn({ err: error, pid: this.pid }, failed);
    }
  }
}
