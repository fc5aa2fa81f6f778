import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { setFlagsFromString } from 'node:v8';
import { badRequest } from '../errors.js';
import type { ReadyCheck } from './ready-schemas.js';

// The `l` flag (V8's linear-time engine) needs this; set at run time, as src/files/search/pattern.ts does,
// so every way envd starts gets it. A `ready.log` pattern then cannot backtrack: no pattern stalls envd.
setFlagsFromString('--enable-experimental-regexp-engine');

/** How long one HTTP readiness attempt may take before it counts as "not yet". */
export const READY_HTTP_ATTEMPT_MS = 1_000;

/** TCP state LISTEN in /proc/net/tcp{,6}. */
const TCP_LISTEN = '0A';

/**
 * A `ready.log` pattern on the linear-time engine. A pattern JavaScript cannot
 * parse, or that needs backtracking (backreferences, lookarounds), is a 400.
 */
export function compileReadyPattern(source: string, field = 'body/ready/log'): RegExp {
  try {
    return new RegExp(source, 'l');
  } catch (error) {
    throw badRequest(`${field}: ${(error as Error).message.replace(/^Invalid regular expression: /, '')} (patterns run on a linear-time engine: no backreferences or lookarounds)`);
  }
}

/** Refuses, before anything starts, a check that can never pass: a bad pattern or URL, or a deadline for no check. */
export function checkReadyCheck(check: ReadyCheck | undefined, timeoutMs: number | undefined, field = 'body/ready'): void {
  if (!check) {
    if (timeoutMs !== undefined) throw badRequest(`${field}_timeout_ms: needs ${field.split('/').pop()} (there is nothing to be ready for)`);
    return;
  }
  if ('log' in check) compileReadyPattern(check.log, `${field}/log`);
  if ('http' in check) {
    let url: URL;
    try {
      url = new URL(check.http.url);
    } catch {
      throw badRequest(`${field}/http/url: ${JSON.stringify(check.http.url)} is not a URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw badRequest(`${field}/http/url: must be http:// or https://, got ${url.protocol}`);
  }
}

/**
 * Whether a TCP socket of this network namespace listens on `port`, on any
 * address: the kernel's own table, so nothing connects to the server (a
 * connect would count as a request to some servers, and fail on a full backlog).
 */
export async function portListening(port: number): Promise<boolean> {
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(table, 'latin1').catch(() => '');
    for (const line of text.split('\n')) {
      const fields = line.trim().split(/\s+/);
      if (fields[3] !== TCP_LISTEN) continue;
      const local = fields[1] ?? '';
      if (Number.parseInt(local.slice(local.lastIndexOf(':') + 1), 16) === port) return true;
    }
  }
  return false;
}

/**
 * One GET of `url`: true when it answers `status` (or any 2xx/3xx). node:http,
 * not fetch: fetch loads undici, 17 MiB envd keeps out of its memory
 * (src/sse-fetch-stand-ins.ts). A probe checks that the server answers, not who
 * it is: https certificates are not verified (dev servers sign their own).
 */
export function httpAnswers(url: string, status: number | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    const request = (url.startsWith('https:') ? httpsRequest : httpRequest)(url, { method: 'GET', timeout: READY_HTTP_ATTEMPT_MS, rejectUnauthorized: false, agent: false }, (response) => {
      const code = response.statusCode ?? 0;
      response.resume();
      response.destroy();
      resolve(status === undefined ? code >= 200 && code < 400 : code === status);
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(false));
    request.end();
  });
}
