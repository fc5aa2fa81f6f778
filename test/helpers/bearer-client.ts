/**
 * Requests to an envd at `url` with its token: a body other than undefined goes as JSON, else
 * `init.body` as it is (a stream needs `duplex: 'half'`, which every request carries). The test
 * server, the proxy fixture and the stress tests each wrote this pair.
 */
export interface BearerClient {
  call(method: string, path: string, body?: unknown, init?: RequestInit): Promise<Response>;
  json(method: string, path: string, body?: unknown, init?: RequestInit): Promise<{ status: number; body: any }>;
}

export function bearerClient(url: string, token: string | undefined): BearerClient {
  const call = (method: string, path: string, body?: unknown, init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    if (token && !headers.has('authorization')) headers.set('authorization', `Bearer ${token}`);
    let payload = init.body;
    if (body !== undefined) {
      headers.set('content-type', 'application/json');
      payload = JSON.stringify(body);
    }
    return fetch(url + path, { ...init, method, headers, body: payload, duplex: 'half' } as RequestInit);
  };
  const json = async (method: string, path: string, body?: unknown, init?: RequestInit) => {
    const response = await call(method, path, body, init);
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  return { call, json };
}
