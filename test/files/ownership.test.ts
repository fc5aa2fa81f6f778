import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findUser } from '../../src/users.js';
import { isRoot, sh } from '../helpers/files.js';
import { startServer, type TestServer } from '../helpers/server.js';

const q = (path: string) => `path=${encodeURIComponent(path)}`;

if (!isRoot) console.warn('SKIPPED (not root): file ownership by username needs root (useradd, chown); run the suite as root, as CI does');
describe.runIf(isRoot)('ownership of created files (root: creates and removes a test user)', () => {
  const name = `envdt${randomBytes(3).toString('hex')}`;
  let uid: number;
  let server: TestServer;
  let dir: string;
  const owner = (path: string) => statSync(path).uid;

  beforeAll(async () => {
    sh('useradd', ['--no-create-home', '--shell', '/bin/sh', name]);
    uid = (await findUser(name))!.uid;
    server = await startServer();
    dir = mkdtempSync(join(tmpdir(), 'envd-own-'));
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
    sh('userdel', [name]);
  });

  it('gives raw uploads and the parent directories they create to `username`, not existing ones', async () => {
    const target = join(dir, 'new/parent/up.bin');
    const response = await server.call('PUT', `/files/raw?${q(target)}&username=${name}`, undefined, { body: 'x', headers: { 'content-type': 'application/octet-stream' } });
    expect(response.status).toBe(200);
    expect([owner(target), owner(join(dir, 'new/parent')), owner(join(dir, 'new'))]).toEqual([uid, uid, uid]);
    expect(owner(dir)).toBe(0);
    expect((await server.json('GET', `/files/info?${q(target)}`)).body.owner).toBe(name);
  });

  it('gives JSON writes, batch files and mkdir directories to `username`', async () => {
    await server.json('POST', '/files', { path: join(dir, 'w.txt'), data: 'x', username: name });
    await server.json('POST', '/files/batch', { files: [{ path: join(dir, 'b/1.txt'), data: 'x' }], username: name });
    await server.json('POST', '/files/mkdir', { path: join(dir, 'm/n'), username: name });
    for (const path of ['w.txt', 'b/1.txt', 'b', 'm/n', 'm']) expect(owner(join(dir, path)), path).toBe(uid);
  });

  it('uses default_user when no username is given, read at request time', async () => {
    const before = server.app.envd.state.defaultUser;
    server.app.envd.state.defaultUser = name;
    try {
      await server.json('POST', '/files', { path: join(dir, 'default.txt'), data: 'x' });
      expect(owner(join(dir, 'default.txt'))).toBe(uid);
    } finally {
      server.app.envd.state.defaultUser = before;
    }
    await server.json('POST', '/files', { path: join(dir, 'root.txt'), data: 'x' });
    expect(owner(join(dir, 'root.txt'))).toBe(0);
  });

  it('refuses an unknown username with 400 on every writing route', async () => {
    mkdirSync(join(dir, 'u'), { recursive: true });
    const answers = await Promise.all([
      server.json('POST', '/files', { path: join(dir, 'u/a'), data: 'x', username: 'no-such-user-envd' }),
      server.json('POST', '/files/batch', { files: [{ path: join(dir, 'u/b'), data: 'x' }], username: 'no-such-user-envd' }),
      server.json('POST', '/files/mkdir', { path: join(dir, 'u/c'), username: 'no-such-user-envd' }),
    ]);
    for (const { status, body } of answers) {
      expect(status).toBe(400);
      expect(body.message).toMatch(/username: unknown user "no-such-user-envd"/);
    }
  });
});
