/**
 * Light stand-ins for the three Fetch classes better-sse touches while it
 * serves a Node HTTP/1 response; build.mjs (`sseWithoutFetch`) puts them in better-sse's module
 * scope in place of the globals.
 *
 * better-sse 0.16 models every session as a Fetch `Request` and `Response`
 * (headers copied in, the status, an abort signal), and checks each request
 * with `instanceof Request`. Node defines those globals lazily: the first
 * touch loads its fetch implementation (undici), which took 80-105 ms and
 * +8 MiB of anonymous and +9 MiB of file-backed memory in a bare Node, paid
 * by envd on its first stream and kept for its life. These hold exactly what
 * better-sse reads back: the request's headers, URL, method and signal; the
 * response's status and headers.
 */

type HeaderInit = Iterable<readonly [string, string]> | Record<string, string | readonly string[] | undefined>;

/** Header names lowercased, as Fetch does; `append` joins with ", ", as Fetch does. */
export class Headers {
  readonly #values = new Map<string, string>();

  constructor(init?: HeaderInit) {
    if (!init) return;
    const entries = Symbol.iterator in init ? init : Object.entries(init);
    for (const [name, value] of entries as Iterable<[string, string | readonly string[] | undefined]>) {
      if (value === undefined) continue;
      if (typeof value === 'string') this.append(name, value);
      else for (const item of value) this.append(name, item);
    }
  }

  get(name: string): string | null {
    return this.#values.get(name.toLowerCase()) ?? null;
  }

  has(name: string): boolean {
    return this.#values.has(name.toLowerCase());
  }

  set(name: string, value: string): void {
    this.#values.set(name.toLowerCase(), String(value));
  }

  append(name: string, value: string): void {
    const key = name.toLowerCase();
    const old = this.#values.get(key);
    this.#values.set(key, old === undefined ? String(value) : `${old}, ${value}`);
  }

  delete(name: string): void {
    this.#values.delete(name.toLowerCase());
  }

  entries(): IterableIterator<[string, string]> {
    return this.#values.entries();
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.#values.entries();
  }
}

export class Request {
  readonly url: string;
  readonly method: string;
  readonly headers: Headers;
  readonly signal: AbortSignal;

  constructor(url: string | URL, init: { method?: string; headers?: HeaderInit; signal?: AbortSignal } = {}) {
    this.url = String(url);
    this.method = init.method ?? 'GET';
    this.headers = new Headers(init.headers);
    this.signal = init.signal ?? new AbortController().signal;
  }
}

export class Response {
  readonly status: number;
  readonly headers: Headers;

  constructor(_body: null, init: { status?: number; headers?: HeaderInit } = {}) {
    this.status = init.status ?? 200;
    this.headers = new Headers(init.headers);
  }
}
