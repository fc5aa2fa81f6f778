// A small HTTP client over node:http with keep-alive, so that client overhead
// stays small and the same for every figure (fetch/undici costs more per call).
import { Agent, request as httpRequest } from 'node:http';

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** Thrown when envd answers 404 with its unknown-route message: the route has not landed yet. */
export class RouteMissing extends Error {}

/**
 * Sends one request to envd. `body` is JSON (an object) or a readable stream
 * (raw bytes, with `headers` giving its Content-Length). Resolves with the
 * response, its body not yet read, unless `read` is set: then { status, body }.
 * `agent` sends it over another pool of connections than the shared one.
 */
export function send(envd, method, path, { body, headers = {}, read = true, signal, agent: through = agent } = {}) {
  return new Promise((resolve, reject) => {
    const json = body !== undefined && typeof body.pipe !== 'function' ? Buffer.from(JSON.stringify(body)) : undefined;
    const req = httpRequest(
      {
        host: envd.host ?? '127.0.0.1',
        port: envd.port,
        method,
        path,
        agent: through,
        signal,
        headers: {
          authorization: `Bearer ${envd.token}`,
          ...(json ? { 'content-type': 'application/json', 'content-length': json.length } : {}),
          ...headers,
        },
      },
      (res) => {
        if (res.statusCode === 404 && !read) {
          // Let the caller see the route-missing case even for streamed replies.
          return collect(res).then((text) => reject(notFound(method, path, text)), reject);
        }
        if (!read) return resolve(res);
        collect(res).then((text) => {
          if (res.statusCode === 404 && isUnknownRoute(text)) return reject(new RouteMissing(`${method} ${path.split('?')[0]}: route missing`));
          resolve({ status: res.statusCode, body: text });
        }, reject);
      },
    );
    req.on('error', (error) => {
      // A streamed body must not keep its file open when the request fails.
      if (typeof body?.destroy === 'function') body.destroy();
      reject(error);
    });
    if (body !== undefined && typeof body.pipe === 'function') body.pipe(req);
    else req.end(json);
  });
}

/** POST a JSON body, expect 2xx, return the parsed reply. */
export async function postJson(envd, path, body) {
  const { status, body: text } = await send(envd, 'POST', path, { body });
  if (status < 200 || status > 299) throw new Error(`POST ${path} answered ${status}: ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

function collect(res) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    res.on('data', (c) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
  });
}

function isUnknownRoute(text) {
  try {
    return /^no route for /.test(JSON.parse(text).message);
  } catch {
    return false;
  }
}

function notFound(method, path, text) {
  return isUnknownRoute(text) ? new RouteMissing(`${method} ${path.split('?')[0]}: route missing`) : new Error(`${method} ${path} answered 404: ${text.slice(0, 300)}`);
}

/**
 * Reads a text/event-stream response event by event: calls `onEvent(event, dataText)`
 * for each; resolves when the stream ends. The data is left as text so the caller
 * decides whether to JSON-parse it.
 */
export function readSse(res, onEvent) {
  return new Promise((resolve, reject) => {
    res.setEncoding('utf8');
    let buffer = '';
    res.on('data', (chunk) => {
      buffer += chunk;
      let end;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = 'message';
        let data = '';
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data += line.slice(line[5] === ' ' ? 6 : 5);
        }
        if (data) onEvent(event, data);
      }
    });
    res.on('end', resolve);
    res.on('error', reject);
    res.on('aborted', () => reject(new Error('stream aborted')));
  });
}

export function closeClient() {
  agent.destroy();
}
