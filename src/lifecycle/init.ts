import type { Static } from '@sinclair/typebox';
import { stat } from 'node:fs/promises';
import { isAbsolute } from 'node:path';
import { checkLimits, type Limits } from '../cgroups/limits.js';
import { badRequest, conflict } from '../errors.js';
import type { SandboxState } from '../sandbox-state.js';
import { resolveUser } from '../users.js';
import { checkIdentity, type IdentityPlan } from './identity.js';
import type { InitBody } from './schemas.js';

export type InitRequest = Static<typeof InitBody>;

/** Everything an /init call will change, checked and ready to apply in one synchronous step. */
export interface InitPlan {
  accessToken?: string;
  envs?: Record<string, string>;
  defaultUser?: string;
  defaultWorkdir?: string;
  defaultLimits?: Limits;
  timestampMs?: number;
  /** entropy, hostname, machine_id, ca_bundle: what makes a fork its own (identity.ts). */
  identity: IdentityPlan;
  forwardLoopback?: boolean;
}

/**
 * Checks every field of an /init body before anything changes, so a body
 * with one bad field leaves the sandbox exactly as it was.
 */
export async function validateInit(body: InitRequest, limitsRefused?: string): Promise<InitPlan> {
  const plan: InitPlan = { identity: checkIdentity(body) };
  if (body.access_token !== undefined) plan.accessToken = body.access_token;
  if (body.envs !== undefined) plan.envs = checkEnvs(body.envs);
  if (body.forward_loopback !== undefined) plan.forwardLoopback = body.forward_loopback;
  if (body.timestamp !== undefined) plan.timestampMs = parseTimestamp(body.timestamp);
  if (body.default_user !== undefined) plan.defaultUser = (await resolveUser(body.default_user, 'default_user')).name;
  if (body.default_workdir !== undefined) plan.defaultWorkdir = await checkWorkdir(body.default_workdir);
  if (body.default_limits !== undefined) {
    // Bad values are a 400 on any machine; only valid limits that need cgroups are refused (409) without them.
    plan.defaultLimits = checkLimits(body.default_limits, 'default_limits');
    if (limitsRefused !== undefined && Object.keys(body.default_limits).length > 0) throw conflict(`default_limits: ${limitsRefused}`);
  }
  return plan;
}

/**
 * Applies a validated plan. Synchronous on purpose: between two awaits nothing
 * else runs, so concurrent /init calls each apply whole, one after the other,
 * and no request ever sees half of one.
 */
export function applyInit(state: SandboxState, plan: InitPlan): void {
  if (plan.accessToken !== undefined) state.token.set(plan.accessToken);
  if (plan.envs !== undefined) state.envs = plan.envs;
  if (plan.defaultUser !== undefined) state.defaultUser = plan.defaultUser;
  if (plan.defaultWorkdir !== undefined) state.defaultWorkdir = plan.defaultWorkdir;
  if (plan.defaultLimits !== undefined) state.defaultLimits = Object.keys(plan.defaultLimits).length > 0 ? plan.defaultLimits : undefined;
}

/** A copy (the caller's object is not kept) of envs that a process environment can actually hold. */
function checkEnvs(envs: Record<string, string>): Record<string, string> {
  const copy: Record<string, string> = {};
  for (const [name, value] of Object.entries(envs)) {
    if (name === '' || name.includes('=') || name.includes('\0')) throw badRequest(`envs: invalid variable name ${JSON.stringify(name)} (must be non-empty, without "=" or NUL)`);
    if (value.includes('\0')) throw badRequest(`envs.${name}: value must not contain a NUL byte`);
    copy[name] = value;
  }
  return copy;
}

function parseTimestamp(text: string): number {
  // The schema checked the shape; this catches impossible dates such as month 13 or 25:00.
  const ms = Date.parse(text);
  if (Number.isNaN(ms)) throw badRequest(`timestamp: not a valid ISO 8601 time: ${JSON.stringify(text)}`);
  return ms;
}

async function checkWorkdir(path: string): Promise<string> {
  if (!isAbsolute(path) || path.includes('\0')) throw badRequest(`default_workdir: must be an absolute path, got ${JSON.stringify(path)}`);
  let isDirectory: boolean;
  try {
    isDirectory = (await stat(path)).isDirectory();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'error';
    throw badRequest(`default_workdir: ${path} cannot be used (${code})`);
  }
  if (!isDirectory) throw badRequest(`default_workdir: ${path} is not a directory`);
  return path;
}
