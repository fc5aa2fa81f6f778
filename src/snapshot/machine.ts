import { readFileSync } from 'node:fs';
import type { CgroupMode } from '../cgroups/detect.js';
import { SYSTEM_IDENTITY_FILES, type IdentityMachine } from '../lifecycle/identity.js';
import type { Logger } from '../logger.js';
import { loadGc, type Gc } from '../memory-reclaim.js';
import { mallocTrimmer, randomReseeder } from '../native/malloc-trim.js';
import { systemBlockMounts } from './filesystems.js';
import { holderJobs } from './holder-jobs.js';
import { SYSTEM_MEMORY_KNOBS } from './memory.js';
import type { SnapshotMachine } from './snapshot-control.js';

/**
 * What a test replaces so that it never syncs, freezes, renames or reseeds
 * this machine's own: its jobs (a recorder, or the holder on a loop-mounted
 * image), the memory knobs, the mounts to freeze and the identity files.
 */
export interface MachineOverrides {
  snapshot?: Partial<SnapshotMachine>;
  identity?: Partial<IdentityMachine>;
}

/** The guest's own, with `overrides` in place. The native addon loads at the first trim or reseed. */
export function machineAccess(
  cgroups: CgroupMode,
  holderPath: string,
  stateDir: string,
  log: Logger,
  overrides: MachineOverrides = {},
): { snapshot: SnapshotMachine; identity: IdentityMachine } {
  const job = holderJobs(holderPath);
  let trimMalloc: (() => void) | undefined;
  let reseed: ((bytes: Uint8Array) => boolean) | undefined;
  let gc: Gc | undefined;
  return {
    snapshot: {
      cgroups,
      job,
      memory: SYSTEM_MEMORY_KNOBS,
      mounts: systemBlockMounts,
      selfCgroup: () => readFileSync('/proc/self/cgroup', 'utf8'),
      trimEnvd: () => {
        gc ??= loadGc();
        gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
        (trimMalloc ??= mallocTrimmer(stateDir, log))();
      },
      ...overrides.snapshot,
    },
    identity: {
      files: SYSTEM_IDENTITY_FILES,
      job,
      reseed: (bytes) => (reseed ??= randomReseeder(stateDir, log))(bytes),
      ...overrides.identity,
    },
  };
}
