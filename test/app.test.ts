import { afterEach, describe, expect, it } from 'vitest';
import { startServer, type TestServer } from './helpers/server.js';

let server: TestServer;
afterEach(async () => server?.close());

describe('the HTTP surface', () => {
  it('answers GET /health without a token, with the version', async () => {
    server = await startServer();
    const response = await fetch(`${server.url}/health`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ok', version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
  });

  it('answers unknown routes and wrong methods with 404 { message }', async () => {
    server = await startServer();
    for (const [method, path] of [['GET', '/nope'], ['DELETE', '/health'], ['PATCH', '/commands']] as const) {
      const { status, body } = await server.json(method, path);
      expect(status).toBe(404);
      expect(body).toEqual({ message: expect.stringContaining(path) });
    }
  });

  it('refuses a missing or wrong token with 401 { message }', async () => {
    server = await startServer();
    const missing = await fetch(`${server.url}/commands`);
    expect(missing.status).toBe(401);
    expect((await missing.json()).message).toMatch(/Authorization/);
    const wrong = await fetch(`${server.url}/commands`, { headers: { authorization: 'Bearer nope' } });
    expect(wrong.status).toBe(401);
    expect((await wrong.json()).message).toMatch(/invalid access token/);
    expect((await server.call('GET', '/commands')).status).toBe(200);
  });

  it('says envd is not initialised until a token is set', async () => {
    server = await startServer({ accessToken: undefined });
    const response = await fetch(`${server.url}/commands`, { headers: { authorization: 'Bearer anything' } });
    expect(response.status).toBe(401);
    expect((await response.json()).message).toMatch(/not initialised/);
  });

  it('tags every answer and log line with a request id, taking the caller\'s when it is sane', async () => {
    server = await startServer();
    const response = await server.call('GET', '/commands', undefined, { headers: { 'x-request-id': 'cp-123' } });
    expect(response.headers.get('x-request-id')).toBe('cp-123');
    expect(server.logs.some((line) => JSON.parse(line).reqId === 'cp-123')).toBe(true);
    const odd = await server.call('GET', '/commands', undefined, { headers: { 'x-request-id': 'has spaces\tand tabs' } });
    expect(odd.headers.get('x-request-id')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('never writes the token into its logs', async () => {
    server = await startServer({ logLevel: 'trace' });
    await fetch(`${server.url}/commands`, { headers: { authorization: `Bearer ${server.token}` } });
    await fetch(`${server.url}/commands`, { headers: { authorization: `Bearer ${server.token}x` } });
    expect(server.logs.length).toBeGreaterThan(0);
    expect(server.logs.join('\n')).not.toContain(server.token);
  });
});

describe('validation messages', () => {
  it('name the field, the unexpected one included', async () => {
    server = await startServer();
    const wrongType = await server.json('POST', '/commands', { cmd: 5 });
    expect(wrongType).toEqual({ status: 400, body: { message: 'body/cmd must be string' } });
    const missing = await server.json('POST', '/commands', {});
    expect(missing.status).toBe(400);
    expect(missing.body.message).toMatch(/body must have required property 'cmd'/);
    const extra = await server.json('POST', '/commands', { cmd: 'true', colour: 'blue' });
    expect(extra).toEqual({ status: 400, body: { message: 'body must NOT have additional properties ("colour")' } });
    const pid = await server.json('GET', '/commands/0x10/wait');
    expect(pid.status).toBe(400);
    expect(pid.body.message).toMatch(/^params\/pid /);
  });
});
