import type { UnixUser } from '../../src/users.js';
import { createTestUser, currentUser, isRoot, type TestUser } from './users.js';

/**
 * The user command tests run as: a fresh user when root (its login shell is
 * quick and quiet, and every command goes through the user switch), else the
 * running user. `remove()` deletes what was created.
 */
export async function commandUser(): Promise<{ user: UnixUser; created: TestUser | undefined; remove(): void }> {
  const created = isRoot() ? await createTestUser() : undefined;
  return { user: created ?? (await currentUser()), created, remove: () => created?.remove() };
}
