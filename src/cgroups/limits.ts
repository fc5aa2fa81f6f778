import { Type, type Static } from '@sinclair/typebox';
import { badRequest } from '../errors.js';

/** What one command may take, each optional (cgroup v2: memory.max with no swap, pids.max, cpu.max). */
export const Limits = Type.Object(
  {
    memory_bytes: Type.Optional(Type.Integer({ description: 'memory.max (swap off): the OOM killer ends the command past it' })),
    pids: Type.Optional(Type.Integer({ description: 'pids.max: forks past it fail' })),
    cpu: Type.Optional(Type.Number({ description: 'cpu.max in cores: 0.5 is half of one core' })),
  },
  { additionalProperties: false, title: 'Limits', description: 'Per-command limits (cgroup v2; 409 where envd runs without it)' },
);
export type Limits = Static<typeof Limits>;

/** Below this a shell cannot even start (bash with its libraries maps ~4 MiB): a clear 400, not an instant OOM kill. */
export const MIN_MEMORY_BYTES = 8 * 1024 * 1024;
/** 1 TiB: above any VM envd runs in; larger is a mistake (a unit off by 1024), not a wish. */
export const MAX_MEMORY_BYTES = 2 ** 40;
/** A shell and one child. */
export const MIN_PIDS = 2;
/** The kernel's own ceiling (pid_max). */
export const MAX_PIDS = 4_194_304;
/** One percent of a core; cpu.max takes at least 1 ms per 100 ms period. */
export const MIN_CPU = 0.01;
export const MAX_CPU = 1024;

/** The limits, checked at their edges; 400 naming the field. */
export function checkLimits(limits: Limits, field: string): Limits {
  const { memory_bytes: memory, pids, cpu } = limits;
  if (memory !== undefined && (memory < MIN_MEMORY_BYTES || memory > MAX_MEMORY_BYTES)) {
    throw badRequest(`${field}/memory_bytes must be from ${MIN_MEMORY_BYTES} (8 MiB: what a shell needs to start) to ${MAX_MEMORY_BYTES}, got ${memory}`);
  }
  if (pids !== undefined && (pids < MIN_PIDS || pids > MAX_PIDS)) throw badRequest(`${field}/pids must be from ${MIN_PIDS} to ${MAX_PIDS}, got ${pids}`);
  if (cpu !== undefined && (!Number.isFinite(cpu) || cpu < MIN_CPU || cpu > MAX_CPU)) throw badRequest(`${field}/cpu must be from ${MIN_CPU} to ${MAX_CPU} cores, got ${cpu}`);
  return limits;
}

/**
 * The request's limits over the sandbox's defaults, field by field; undefined
 * when no field is set. `limits: {}` asks for no limit, so it needs no cgroup:
 * like `/init { default_limits: {} }`, it is accepted on any machine.
 */
export function mergeLimits(defaults: Limits | undefined, given: Limits | undefined): Limits | undefined {
  const merged = { ...defaults, ...given };
  return Object.keys(merged).length > 0 ? merged : undefined;
}
