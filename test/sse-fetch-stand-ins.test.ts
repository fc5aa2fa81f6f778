import { describe, expect, it } from 'vitest';
import * as standIns from '../src/sse-fetch-stand-ins.js';

// better-sse's Node HTTP/1 adapter, as it uses the three classes: a Request
// built from the URL, method and signal, the request's headers copied in, a
// Response with its status and constant headers, the reply's headers merged
// in, then Object.fromEntries(response.headers) handed to writeHead.
type Classes = { Request: typeof Request; Response: typeof Response; Headers: typeof Headers };

function applyHeaders(classes: Classes, from: Headers | Record<string, string | string[] | undefined>, to: Headers): void {
  const fromMap = from instanceof classes.Headers ? Object.fromEntries(from as Headers) : (from as Record<string, string | string[] | undefined>);
  for (const [key, value] of Object.entries(fromMap)) {
    if (Array.isArray(value)) {
      to.delete(key);
      for (const item of value) to.append(key, item);
    } else if (value === undefined) to.delete(key);
    else to.set(key, value);
  }
}

function session(classes: Classes) {
  const controller = new AbortController();
  const request = new classes.Request(new URL('http://sandbox/commands/7/stream?from=3-0'), { method: 'GET', signal: controller.signal });
  applyHeaders(classes, { host: 'sandbox', 'Last-Event-ID': '12-4', accept: 'text/event-stream', 'x-forwarded-for': ['10.0.0.1', '10.0.0.2'] }, request.headers);
  const response = new classes.Response(null, { status: 200, headers: { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'X-Accel-Buffering': 'no' } });
  applyHeaders(classes, { 'content-type': 'text/event-stream; charset=utf-8', 'X-Request-Id': 'r-1', pragma: undefined }, response.headers);
  applyHeaders(classes, new classes.Headers({ 'Set-Cookie': 'a=1' }), response.headers);
  controller.abort();
  return {
    lastEventId: request.headers.get('last-event-id'),
    missing: request.headers.get('x-missing'),
    forwarded: request.headers.get('X-Forwarded-For'),
    url: request.url,
    method: request.method,
    aborted: request.signal.aborted,
    status: response.status,
    head: Object.fromEntries(response.headers),
    has: response.headers.has('x-request-id'),
  };
}

describe('the Fetch stand-ins better-sse is bundled with', () => {
  it('answer what better-sse reads exactly as the real Fetch classes do', () => {
    const real = session({ Request, Response, Headers });
    expect(session(standIns as unknown as Classes)).toEqual(real);
    expect(real.lastEventId).toBe('12-4');
    expect(real.head['content-type']).toBe('text/event-stream; charset=utf-8');
  });
});
