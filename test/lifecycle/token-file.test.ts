import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';

const dirs: string[] = [];
const running: EnvdProcess[] = [];
afterEach(async () => {
  for (const envd of running.splice(0)) await envd.stop();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function start(tokenFile: string): Promise<EnvdProcess> {
  const envd = await startEnvdProcess(['--access-token-file', tokenFile]);
  running.push(envd);
  return envd;
}

const init = (url: string, body: unknown, token?: string) =>
  fetch(`${url}/init`, { method: 'POST', headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });

describe('the token file', () => {
  it('keeps the token /init set across an envd restart, so /init does not reopen', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'envd-token-'));
    dirs.push(dir);
    const tokenFile = join(dir, 'run', 'envd', 'token');

    const first = await start(tokenFile);
    expect((await init(first.url, { access_token: 'first-token' })).status).toBe(204);
    expect(readFileSync(tokenFile, 'utf8')).toBe('first-token');
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    expect((await init(first.url, { access_token: 'rotated-token' }, 'first-token')).status).toBe(204);
    expect(readFileSync(tokenFile, 'utf8')).toBe('rotated-token');
    expect(await first.stop('SIGKILL')).toBeNull();

    // As systemd would: the same configuration, a new process.
    const second = await start(tokenFile);
    expect((await init(second.url, { access_token: 'hijack' })).status).toBe(401);
    expect((await fetch(`${second.url}/envs`, { headers: { authorization: 'Bearer rotated-token' } })).status).toBe(200);
    expect((await fetch(`${second.url}/envs`, { headers: { authorization: 'Bearer first-token' } })).status).toBe(401);
  });

  it('is written nowhere else and never into the logs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'envd-token-'));
    dirs.push(dir);
    const envd = await start(join(dir, 'token'));
    expect((await init(envd.url, { access_token: 'quiet-token' })).status).toBe(204);
    await envd.stop();
    expect(envd.lines.join('\n')).not.toContain('quiet-token');
    // Only the token file itself: no temporary left beside it.
    expect(readdirSync(dir)).toEqual(['token']);
  });
});
