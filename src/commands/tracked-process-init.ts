import type { CommandCgroups } from '../cgroups/command-cgroups.js';
import type { Logger } from '../logger.js';
import type { HolderLink } from './holder-link.js';
import type { CommandMeta, HolderPids } from './meta.js';

/** What the registry knows of a command when it starts following it (started now, or re-adopted). */
export interface TrackedProcessInit {
  id: string;
  dir: string;
  meta: CommandMeta;
  pids: HolderPids;
  /**
   * The live channel to the holder; undefined when envd could not connect, in which case the
   * holder's pid record decides: alive (stopped, out of fds, slow) means the command runs and envd
   * reconnects, gone means it ended (its status file says how).
   */
  link: HolderLink | undefined;
  reaped: boolean;
  /** Re-adopted after a restart of envd: kept once finished, whoever started it (its client is gone). */
  adopted: boolean;
  /** Its cgroup (cgroup mode): known before the link can report the end (a command that ended while envd was down). */
  cgroup?: { cgroups: CommandCgroups; id: string } | undefined;
  logEnd: number;
  logger: Logger;
}
