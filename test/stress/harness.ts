import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { countFds, rssBytes, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { createTestUser, isRoot, type TestUser } from '../helpers/users.js';

/** A separate envd process, the scratch directory it works in, and ways to measure it. */
export interface StressEnvd {
  envd: EnvdProcess;
  pid: number;
  url: string;
  token: string;
  dir: string;
  call(method: string, path: string, body?: unknown, init?: RequestInit): Promise<Response>;
  /** One request on its own connection (closed after it), read even if envd answers before the body is sent. */
  once(method: string, path: string, body?: string | Buffer, headers?: Record<string, string>): Promise<{ status: number; json: any }>;
  /** Declares a JSON body of `declared` bytes, sends its first KiB and waits: envd must refuse it from the header alone. */
  declareBody(method: string, path: string, declared: number): Promise<{ status: number; json: any }>;
  fds(): number;
  rss(): number;
  stop(): Promise<void>;
}

export async function startStressEnvd(args: string[] = []): Promise<StressEnvd> {
  const token = randomBytes(16).toString('hex');
  const dir = mkdtempSync(join(tmpdir(), 'envd-stress-'));
  // Commands run as a plain sandbox user, as in a real sandbox: root's login
  // shell on the build machines runs pyenv's rehash, which serialises
  // concurrent shells on a lock and would measure pyenv, not envd.
  const user: TestUser | undefined = isRoot() ? await createTestUser() : undefined;
  if (user) chownSync(dir, user.uid, user.gid);
  const userArgs = user ? ['--default-user', user.name] : [];
  const envd = await startEnvdProcess(['--default-workdir', dir, ...userArgs, ...args], { ENVD_ACCESS_TOKEN: token });
  const pid = envd.child.pid!;
  const call = (method: string, path: string, body?: unknown, init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    if (!headers.has('authorization')) headers.set('authorization', `Bearer ${token}`);
    let payload = init.body;
    if (body !== undefined) {
      headers.set('content-type', 'application/json');
      payload = JSON.stringify(body);
    }
    return fetch(envd.url + path, { ...init, method, headers, body: payload, duplex: 'half' } as RequestInit);
  };
  const once = (method: string, path: string, body?: string | Buffer, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; json: any }>((resolve, reject) => {
      const baseHeaders: Record<string, string> = { authorization: `Bearer ${token}` };
      if (body !== undefined) baseHeaders['content-type'] = 'application/json';
      const req = request(envd.url + path, { method, agent: false, headers: { ...baseHeaders, ...headers }, timeout: 30_000 }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : undefined });
        });
      });
      // envd may answer (413) and close while the body is still being sent: the answer still counts.
      req.on('error', (error) => setTimeout(() => reject(new Error(`${method} ${path}: ${error.message} and no answer`)), 2_000));
      req.on('timeout', () => req.destroy(new Error('no answer within 30 s')));
      if (headers['content-length'] && body !== undefined) req.write(body);
      else req.end(body);
    });
  const declareBody = (method: string, path: string, declared: number) =>
    once(method, path, '{"data":"' + 'x'.repeat(1024), { 'content-length': String(declared) });
  return {
    envd, pid, url: envd.url, token, dir, call, once, declareBody,
    fds: () => countFds(pid),
    rss: () => rssBytes(pid),
    async stop() {
      await envd.stop();
      rmSync(dir, { recursive: true, force: true });
      user?.remove();
      // Every scenario's logs, searched whole: the token must never be in them.
      const leaked = envd.lines.filter((line) => line.includes(token)).length;
      if (leaked > 0) throw new Error(`the access token appeared in ${leaked} log lines`);
    },
  };
}

/** Waits until envd's fd count is back within `slack` of the baseline; returns the count seen. */
export async function settleFds(target: StressEnvd, baseline: number, slack = 2): Promise<number> {
  await waitFor(() => target.fds() <= baseline + slack, 10_000, `fds back to ${baseline} (+${slack})`).catch(() => undefined);
  return target.fds();
}

/** Prints one scenario's figures in a form the closing note can quote. */
export function report(scenario: string, figures: Record<string, unknown>): void {
  const text = Object.entries(figures).map(([k, v]) => `${k}=${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(1) : String(v)}`);
  console.log(`[stress] ${scenario}: ${text.join(' ')}`);
}

export const MiB = 1024 * 1024;
