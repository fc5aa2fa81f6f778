import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { countFds, rssBytes, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';

/** A separate envd process, the scratch directory it works in, and ways to measure it. */
export interface StressEnvd {
  envd: EnvdProcess;
  pid: number;
  url: string;
  token: string;
  dir: string;
  call(method: string, path: string, body?: unknown, init?: RequestInit): Promise<Response>;
  fds(): number;
  rss(): number;
  stop(): Promise<void>;
}

export async function startStressEnvd(args: string[] = []): Promise<StressEnvd> {
  const token = randomBytes(16).toString('hex');
  const dir = mkdtempSync(join(tmpdir(), 'envd-stress-'));
  const envd = await startEnvdProcess(['--default-workdir', dir, ...args], { ENVD_ACCESS_TOKEN: token });
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
  return {
    envd, pid, url: envd.url, token, dir, call,
    fds: () => countFds(pid),
    rss: () => rssBytes(pid),
    async stop() {
      await envd.stop();
      rmSync(dir, { recursive: true, force: true });
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
