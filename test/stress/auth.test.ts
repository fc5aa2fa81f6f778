import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { report, startStressEnvd, type StressEnvd } from './harness.js';

let target: StressEnvd;
beforeAll(async () => {
  target = await startStressEnvd(['--log-level', 'trace']);
});
afterAll(async () => target?.stop());

describe('the auth matrix', () => {
  it('refuses every route of the OpenAPI document without a token and with a wrong one', async () => {
    const doc = await (await target.call('GET', '/openapi.json')).json();
    let checked = 0;
    for (const [path, ops] of Object.entries<any>(doc.paths)) {
      for (const method of Object.keys(ops).filter((m) => ['get', 'post', 'put', 'delete'].includes(m))) {
        const url = target.url + path.replace('{pid}', '1') + '?path=/tmp';
        for (const authorization of [undefined, 'Bearer wrong', `Bearer ${target.token}x`, `Basic ${target.token}`, target.token]) {
          const headers: Record<string, string> = { 'content-type': 'application/json' };
          if (authorization) headers.authorization = authorization;
          const response = await fetch(url, { method: method.toUpperCase(), headers, body: method === 'get' ? undefined : '{}' });
          const expected = path === '/health' ? 200 : 401;
          expect(response.status, `${method} ${path} with ${authorization ?? 'no header'}`).toBe(expected);
          if (expected === 401) expect(typeof (await response.json()).message).toBe('string');
          else await response.body?.cancel();
          checked++;
        }
      }
    }
    report('auth matrix', { requests: checked });
    expect(checked).toBeGreaterThan(50);
  });

  it('never writes the token into the logs, even at trace level', async () => {
    // By now this envd has served the matrix above and this file's calls.
    await target.call('POST', '/commands', { cmd: `echo ${'not-the-token'}` });
    await target.call('POST', '/init', { access_token: target.token, envs: { A: '1' } });
    const logs = target.envd.lines.join('\n');
    expect(target.envd.lines.length).toBeGreaterThan(10);
    expect(logs).not.toContain(target.token);
    report('token in logs', { lines: target.envd.lines.length, found: logs.includes(target.token) });
  });
});
