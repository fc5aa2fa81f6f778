import { readFile } from 'node:fs/promises';

export interface OwnerNames {
  user(uid: number): string;
  group(gid: number): string;
}

async function readIdNames(path: string): Promise<Map<number, string>> {
  const names = new Map<number, string>();
  const text = await readFile(path, 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    const fields = line.split(':');
    const id = Number(fields[2]);
    // The first line for an id wins, as with getpwuid(3).
    if (fields[0] && fields.length >= 3 && Number.isInteger(id) && !names.has(id)) names.set(id, fields[0]);
  }
  return names;
}

/**
 * uid/gid -> name from /etc/passwd and /etc/group, read once per request (a
 * listing asks thousands of times) and never cached across requests, so a
 * `useradd` shows at once. An id with no name is shown as its number.
 */
export async function readOwnerNames(): Promise<OwnerNames> {
  const [users, groups] = await Promise.all([readIdNames('/etc/passwd'), readIdNames('/etc/group')]);
  return {
    user: (uid) => users.get(uid) ?? String(uid),
    group: (gid) => groups.get(gid) ?? String(gid),
  };
}
