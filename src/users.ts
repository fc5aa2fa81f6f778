import { readFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { badRequest } from './errors.js';

export interface UnixUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

const PASSWD = '/etc/passwd';

/**
 * Looks a user up in /etc/passwd. Sandbox images keep their accounts there;
 * reading the file (a few hundred bytes) per request keeps envd right after
 * `useradd` without a cache to invalidate.
 */
export async function findUser(name: string, passwdPath = PASSWD): Promise<UnixUser | undefined> {
  const text = await readFile(passwdPath, 'utf8');
  for (const line of text.split('\n')) {
    const fields = line.split(':');
    if (fields[0] !== name || fields.length < 7) continue;
    return {
      name,
      uid: Number(fields[2]),
      gid: Number(fields[3]),
      home: fields[5] || '/',
      shell: fields[6] || '/bin/sh',
    };
  }
  return undefined;
}

/** The named user, or a 400 naming the field the name came from. */
export async function resolveUser(name: string, field: string): Promise<UnixUser> {
  const user = await findUser(name);
  if (!user) throw badRequest(`${field}: unknown user ${JSON.stringify(name)}`);
  return user;
}

/** The name of the user envd itself runs as. */
export function runningUserName(): string {
  return userInfo().username;
}
