import { connect } from 'node:net';
import { request } from 'node:http';
import { JSON_BODY_LIMIT } from '../../src/app.js';
import { UPLOAD_LIMIT } from '../../src/files/upload.js';
import { putRaw, type RawResult } from './files.js';

/**
 * Clients that send a body over envd's limits, the way real clients do. `base`
 * is envd's URL, or a proxy's with its `/sandboxes/<id>` prefix.
 */

const q = (path: string) => `path=${encodeURIComponent(path)}`;

/** A JSON write of 11 MiB with fetch (which stops sending once the answer is complete). */
export async function postJsonOverLimit(base: string, token: string, path: string): Promise<RawResult> {
  const body = JSON.stringify({ path, data: 'a'.repeat(JSON_BODY_LIMIT + 1024 * 1024) });
  const response = await fetch(`${base}/files`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

/**
 * A raw upload declaring Content-Length one byte over 500 MiB and sending
 * real bytes (1 MiB chunks, as fast as the connection takes them) until the
 * answer arrives, then stopping, as a streaming client does.
 */
export function putDeclaredOverLimit(base: string, token: string, path: string): Promise<RawResult> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}/files/raw?${q(path)}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/octet-stream', 'content-length': String(UPLOAD_LIMIT + 1) },
    });
    const chunk = Buffer.alloc(1024 * 1024, 7);
    let sent = 0;
    let answered = false;
    const send = () => {
      while (!answered && sent + chunk.length <= UPLOAD_LIMIT) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', send);
      }
    };
    req.on('response', async (res) => {
      answered = true;
      let text = '';
      res.setEncoding('utf8');
      try {
        for await (const part of res) text += part;
      } catch {
        // closed right after the answer: what arrived is the answer
      }
      req.destroy();
      resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined });
    });
    req.on('error', (error) => {
      if (!answered) reject(error);
    });
    send();
  });
}

/** A chunked raw upload (no declared length) that passes 500 MiB. */
export function putChunkedOverLimit(base: string, token: string, path: string): Promise<RawResult> {
  return putRaw(base, token, q(path), zerosOver(UPLOAD_LIMIT + 1));
}

async function* zerosOver(total: number): AsyncGenerator<Buffer> {
  const chunk = Buffer.alloc(1024 * 1024);
  for (let left = total; left > 0; left -= chunk.length) yield left >= chunk.length ? chunk : chunk.subarray(0, left);
}

/**
 * A client that writes its whole request before it reads a byte of the answer
 * (curl without Expect, Python requests): a plain socket sends `head` and
 * `bodyBytes` of body, then reads the answer. Resolves with the status and
 * the parsed JSON body of the answer.
 */
export function sendWholeThenRead(base: string, head: string, bodyBytes: number, fill = 'a'): Promise<RawResult> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    // Half-open: like a client busy writing, it does not stop when the server's FIN arrives.
    const socket = connect({ port: Number(url.port), host: url.hostname, allowHalfOpen: true });
    let received = '';
    let writeError: Error | undefined;
    socket.pause();
    socket.on('error', (error) => {
      writeError = error;
    });
    // The server's FIN ends the answer (this socket is half-open: it would not close by itself).
    const finish = () => {
      socket.destroy();
      const match = /^HTTP\/1\.1 (\d{3})[^]*?\r\n\r\n([^]*)$/.exec(received);
      // The server must let the whole body in (it lingers): a reset mid-body is a failure even if the answer came.
      if (writeError) return reject(new Error(`the body could not be sent whole: ${writeError.message}`));
      if (!match) return reject(new Error(`no answer: ${JSON.stringify(received.slice(0, 200))}`));
      const body = match[2]!;
      resolve({ status: Number(match[1]), body: body ? JSON.parse(body) : undefined });
    };
    socket.once('close', finish);
    socket.on('connect', async () => {
      socket.write(head);
      const chunk = Buffer.alloc(1024 * 1024, fill);
      for (let left = bodyBytes; left > 0 && !writeError; left -= chunk.length) {
        const part = left >= chunk.length ? chunk : chunk.subarray(0, left);
        if (!socket.write(part)) await new Promise((r) => socket.once('drain', r).once('close', r));
      }
      // Only now read the answer.
      socket.setEncoding('utf8');
      socket.on('data', (text: string) => (received += text));
      socket.once('end', finish);
      socket.resume();
    });
  });
}

/** The request head of a POST /files with a JSON body of `length` bytes (sent by sendWholeThenRead). */
export function jsonHead(base: string, token: string, length: number): string {
  const url = new URL(base);
  return `POST ${url.pathname.replace(/\/$/, '')}/files HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
}

/** The request head of a raw upload declaring `length` bytes. */
export function uploadHead(base: string, token: string, path: string, length: number): string {
  const url = new URL(base);
  return `PUT ${url.pathname.replace(/\/$/, '')}/files/raw?${q(path)} HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${token}\r\ncontent-type: application/octet-stream\r\ncontent-length: ${length}\r\n\r\n`;
}
