import { isAbsolute, resolve } from 'node:path';
import { badRequest } from '../errors.js';
import type { SandboxState } from '../sandbox-state.js';
import { resolveUser } from '../users.js';

/**
 * A path from a query or body, checked once: absolute, no NUL byte. The
 * result is normalised (`/a/./b/../c/` -> `/a/c`) so that duplicate checks
 * and error messages see one spelling.
 */
export function checkPath(value: string, field: string): string {
  if (value.includes('\0')) throw badRequest(`${field}: must not contain a NUL byte`);
  if (!isAbsolute(value)) throw badRequest(`${field}: must be an absolute path, got ${JSON.stringify(value)}`);
  return resolve(value);
}

/** Who files and directories created by a request belong to. */
export interface Owner {
  uid: number;
  gid: number;
}

/**
 * The owner for new files: `username` when given, else the sandbox's default
 * user, read at request time so that `/init` applies to the next request.
 * An unknown user is a 400 either way. `undefined` means "do not chown":
 * only root may give files away, and a non-root envd's files are already its own.
 */
export async function resolveOwner(state: SandboxState, username: string | undefined, field = 'username'): Promise<Owner | undefined> {
  const user = await resolveUser(username ?? state.defaultUser, username === undefined ? 'default_user' : field);
  if (process.getuid?.() !== 0) return undefined;
  return { uid: user.uid, gid: user.gid };
}
