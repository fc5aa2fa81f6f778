/** The answer envd gave instead of success: its HTTP status and its `{message}` (or why it could not be reached, status 0). */
export class EnvdError extends Error {
  override name = 'EnvdError';
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface ClientOptions {
  /** envd's base URL, with any path prefix of a proxy (e.g. https://api.example/sandboxes/ID). */
  url: string;
  /** The access token, sent as `Authorization: Bearer`. */
  token?: string | undefined;
}

export interface CallOptions {
  signal?: AbortSignal | undefined;
}

type Query = Record<string, string | number | boolean | undefined>;

/** One HTTP transport for every method: base URL with a prefix, the token, the signal, and one error path. */
export class Http {
  readonly base: string;
  private readonly token: string | undefined;

  constructor(options: ClientOptions) {
    this.base = options.url.replace(/\/+$/, '');
    this.token = options.token;
  }

  url(path: string, query: Query = {}): string {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) if (value !== undefined) params.set(key, String(value));
    const search = params.toString();
    return this.base + path + (search ? `?${search}` : '');
  }

  /** Sends a request and answers the response if it is 2xx; anything else is an EnvdError. */
  async send(method: string, path: string, init: { query?: Query; json?: unknown; body?: BodyInit; headers?: Record<string, string>; signal?: AbortSignal | undefined } = {}): Promise<Response> {
    const headers: Record<string, string> = { ...init.headers };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    let body = init.body;
    if (init.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(init.json);
    }
    let response: Response;
    try {
      response = await fetch(this.url(path, init.query), { method, headers, body, signal: init.signal ?? null, ...(body instanceof ReadableStream ? { duplex: 'half' } : {}) } as RequestInit);
    } catch (error) {
      if ((error as Error).name === 'AbortError') throw error;
      // fetch says only "fetch failed"; the reason (ECONNREFUSED, a DNS error) is its cause.
      const cause = (error as { cause?: { message?: string } }).cause?.message ?? (error as Error).message;
      throw new EnvdError(0, `cannot reach envd at ${this.base}: ${cause}`);
    }
    if (response.ok) return response;
    const text = await response.text();
    let message = text.trim() || response.statusText;
    try {
      message = (JSON.parse(text) as { message?: string }).message ?? message;
    } catch {
      // Not JSON (a proxy's page): keep the text.
    }
    throw new EnvdError(response.status, message);
  }

  async json<T>(method: string, path: string, init: Parameters<Http['send']>[2] = {}): Promise<T> {
    return (await (await this.send(method, path, init)).json()) as T;
  }
}
