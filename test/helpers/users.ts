import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { findUser, runningUserName, type UnixUser } from '../../src/users.js';

export const isRoot = () => process.getuid?.() === 0;

export interface TestUser extends UnixUser {
  /** A supplementary group the user belongs to (not its primary group). */
  extraGroup: { name: string; gid: number };
  remove(): void;
}

/**
 * A fresh Unix user with a home from /etc/skel and one extra group. Root only:
 * the caller skips (loudly) otherwise.
 */
export async function createTestUser(): Promise<TestUser> {
  const suffix = randomBytes(3).toString('hex');
  const name = `envdt${suffix}`;
  const group = `envdg${suffix}`;
  execFileSync('groupadd', [group]);
  execFileSync('useradd', ['--create-home', '--shell', '/bin/bash', '--groups', group, name]);
  const user = await findUser(name);
  if (!user) throw new Error(`useradd did not create ${name}`);
  const gid = Number(execFileSync('getent', ['group', group], { encoding: 'utf8' }).split(':')[2]);
  return {
    ...user,
    extraGroup: { name: group, gid },
    remove() {
      // Anything still running as the user would make userdel refuse.
      try {
        execFileSync('pkill', ['-KILL', '-u', name]);
      } catch {
        // nothing was running
      }
      execFileSync('userdel', ['--remove', name], { stdio: 'ignore' });
      execFileSync('groupdel', [group], { stdio: 'ignore' });
    },
  };
}

/** The user envd runs as in these tests. */
export async function currentUser(): Promise<UnixUser> {
  const user = await findUser(runningUserName());
  if (!user) throw new Error('the running user is not in /etc/passwd');
  return user;
}
