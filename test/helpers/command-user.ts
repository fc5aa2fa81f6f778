import { afterAll, afterEach, beforeAll } from 'vitest';
import type { UnixUser } from '../../src/users.js';
import { findProcesses } from './proc.js';
import { startServer, type TestServer } from './server.js';
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

export interface CommandFixture {
  server: TestServer;
  user: UnixUser;
  created: TestUser | undefined;
  /** Markers of the commands a test starts: whatever a failed test left running is killed after it. */
  markers: string[];
}

/** Registers the hooks of a command test file: the command user, an envd whose commands run as that user. */
export function useCommandServer(): CommandFixture {
  const fixture = { markers: [] as string[] } as CommandFixture;
  let remove = () => {};
  beforeAll(async () => {
    const made = await commandUser();
    remove = made.remove;
    Object.assign(fixture, { user: made.user, created: made.created });
    fixture.server = await startServer({ defaultUser: made.user.name });
  });
  afterEach(() => {
    for (const marker of fixture.markers.splice(0)) for (const pid of findProcesses(marker)) process.kill(pid, 'SIGKILL');
  });
  afterAll(async () => {
    await fixture.server?.close();
    remove();
  });
  return fixture;
}
