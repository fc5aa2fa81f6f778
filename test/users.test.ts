// Users as an image's own files describe them, with nothing else to ask
// (no NSS, no getent, no setpriv): /etc/passwd, /etc/group, or neither.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findUser, userGroups } from '../src/users.js';

const dir = mkdtempSync(join(tmpdir(), 'envd-users-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};

describe('users from the image', () => {
  it('gives a user its primary group and every group of /etc/group that lists it, and only those', async () => {
    const group = file('group', 'root:x:0:\nwheel:x:10:alice,bob\naudio:x:29:bob\nvideo:x:44:alicia\nbroken:x:zz:alice\nalice:x:1000:\n');
    const alice = { name: 'alice', uid: 1000, gid: 1000, home: '/home/alice', shell: '/bin/sh' };
    expect((await userGroups(alice, group)).sort((a, b) => a - b)).toEqual([10, 1000]);
  });

  it('gives the primary group alone where the image has no /etc/group', async () => {
    expect(await userGroups({ name: 'alice', uid: 1000, gid: 1000, home: '/', shell: '/bin/sh' }, join(dir, 'missing'))).toEqual([1000]);
  });

  it('knows no one but root where the image has no /etc/passwd, and root without a line for it', async () => {
    const missing = join(dir, 'no-passwd');
    expect(await findUser('alice', missing)).toBeUndefined();
    expect(await findUser('root', missing)).toEqual({ name: 'root', uid: 0, gid: 0, home: '/root', shell: '/bin/sh' });
    const passwd = file('passwd', 'daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n');
    expect(await findUser('root', passwd)).toMatchObject({ uid: 0 });
  });
});
