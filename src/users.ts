import { readFileSync } from 'node:fs';
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
const GROUP = '/etc/group';

/**
 * root as envd assumes it when /etc/passwd has no line for it (an image that
 * ships a passwd of service accounts only): envd runs as root, and so can its
 * commands. The home is checked where it is used (a missing one means /).
 */
const IMPLICIT_ROOT: UnixUser = { name: 'root', uid: 0, gid: 0, home: '/root', shell: '/bin/sh' };

/**
 * A file's text, or undefined when the image has no such file. Read at once:
 * /etc/passwd and /etc/group are a few KiB in the page cache, and the
 * promise-based readFile took four trips through the thread pool for each,
 * on every command (bench/profile.mjs exec-throughput).
 */
async function readIfPresent(path: string): Promise<string | undefined> {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/**
 * Looks a user up in /etc/passwd. Sandbox images keep their accounts there;
 * reading the file (a few hundred bytes) per request keeps envd right after
 * `useradd` without a cache to invalidate. An image without the file has no
 * users but root (IMPLICIT_ROOT).
 */
export async function findUser(name: string, passwdPath = PASSWD): Promise<UnixUser | undefined> {
  const text = (await readIfPresent(passwdPath)) ?? '';
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
  return name === 'root' ? IMPLICIT_ROOT : undefined;
}

/** The named user, or a 400 naming the field the name came from. */
export async function resolveUser(name: string, field: string): Promise<UnixUser> {
  const user = await findUser(name);
  if (!user) throw badRequest(`${field}: unknown user ${JSON.stringify(name)}`);
  return user;
}

/**
 * The user's groups as login gives them: the primary group, then every group
 * of /etc/group that lists the user as a member (initgroups(3) reads the same
 * file). An image without /etc/group gives the primary group alone.
 */
export async function userGroups(user: UnixUser, groupPath = GROUP): Promise<number[]> {
  const groups = new Set([user.gid]);
  for (const line of ((await readIfPresent(groupPath)) ?? '').split('\n')) {
    const [, , gid, members] = line.split(':');
    if (gid === undefined || members === undefined || !/^\d+$/.test(gid)) continue;
    if (members.split(',').includes(user.name)) groups.add(Number(gid));
  }
  return [...groups];
}

/**
 * The name of the user envd itself runs as; root, or the uid as a string,
 * when /etc/passwd has no line for it (os.userInfo() would throw).
 */
export function runningUserName(): string {
  try {
    return userInfo().username;
  } catch {
    const uid = process.getuid?.() ?? 0;
    return uid === 0 ? 'root' : String(uid);
  }
}
