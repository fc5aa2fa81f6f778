/** A tiny envd client over fetch: the guest suite talks to envd the way the control plane does. */
export interface EnvdClient {
  url: string;
  token: string | undefined;
  call(method: string, path: string, body?: unknown, init?: RequestInit): Promise<Response>;
  json<T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
}

export function createClient(url: string): EnvdClient {
  const client: EnvdClient = {
    url,
    token: undefined,
    async call(method, path, body, init = {}) {
      const headers = new Headers(init.headers);
      if (client.token !== undefined && !headers.has('authorization')) headers.set('authorization', `Bearer ${client.token}`);
      let payload = init.body;
      if (body !== undefined) {
        headers.set('content-type', 'application/json');
        payload = JSON.stringify(body);
      }
      return fetch(`${url}${path}`, { ...init, method, headers, body: payload, signal: init.signal ?? AbortSignal.timeout(120_000) });
    },
    async json(method, path, body) {
      const response = await client.call(method, path, body);
      const text = await response.text();
      return { status: response.status, body: text === '' ? undefined : JSON.parse(text) };
    },
  };
  return client;
}

/** Polls GET /health until it answers 200; returns the milliseconds it took. */
export async function waitForHealth(url: string, timeoutMs: number, isAlive: () => boolean = () => true): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < timeoutMs) {
    if (!isAlive()) throw new Error('the guest exited before envd answered /health');
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) });
      if (response.status === 200) return Date.now() - started;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`envd at ${url} did not answer /health within ${timeoutMs} ms`);
}

/** Runs a foreground command and returns its result, failing loudly on a non-200. */
export async function run(client: EnvdClient, cmd: string, extra: Record<string, unknown> = {}): Promise<{ stdout: string; stderr: string; exit_code: number }> {
  const { status, body } = await client.json('POST', '/commands', { cmd, ...extra });
  if (status !== 200) throw new Error(`POST /commands ${JSON.stringify(cmd)} -> ${status} ${JSON.stringify(body)}`);
  return body;
}
