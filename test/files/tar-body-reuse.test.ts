import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip, gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TarBody } from '../../src/files/tar/body.js';

let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-tar-body-'));
  // Several of the writer's 1 MiB pieces, so that its buffers come round again.
  for (let i = 0; i < 6; i++) {
    mkdirSync(join(dir, `d${i}`));
    writeFileSync(join(dir, `d${i}`, 'blob.bin'), randomBytes(900_000 + i * 1000));
    writeFileSync(join(dir, `d${i}`, 'note.txt'), `note ${i}\n`);
  }
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The tar as bytes copied the moment they come out: what the stream meant to send. */
async function copiedAsRead(body: TarBody): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of body) parts.push(Buffer.from(chunk as Buffer));
  return Buffer.concat(parts);
}

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe('TarBody reuses a buffer only once its bytes have left the process (issue 44)', () => {
  it('piped into a Transform whose consumer keeps the chunks, every chunk keeps its bytes', async () => {
    const want = await copiedAsRead(new TarBody(dir));
    // A consumer that keeps the very Buffers it was given (as Readable.toWeb and fetch queue them), slowly.
    const kept: Buffer[] = [];
    const counter = new Transform({ transform: (chunk, _encoding, next) => next(null, chunk) });
    const slow = new Writable({
      highWaterMark: 1,
      write(chunk: Buffer, _encoding, next) {
        kept.push(chunk);
        setTimeout(next, 2);
      },
    });
    await pipeline(new TarBody(dir).pipe(counter), slow);
    expect(sha(Buffer.concat(kept))).toBe(sha(want));
  });

  it('piped into a PassThrough read by hand, likewise', async () => {
    const want = await copiedAsRead(new TarBody(dir));
    const kept: Buffer[] = [];
    const through = new TarBody(dir).pipe(new PassThrough());
    for await (const chunk of through) kept.push(chunk as Buffer);
    expect(sha(Buffer.concat(kept))).toBe(sha(want));
  });

  it('piped into gzip (where buffers are recycled), the archive is still whole', async () => {
    const want = await copiedAsRead(new TarBody(dir));
    const parts: Buffer[] = [];
    await pipeline(new TarBody(dir).pipe(createGzip()), new Writable({ write: (chunk, _e, next) => (parts.push(chunk), next()) }));
    expect(sha(gunzipSync(Buffer.concat(parts)))).toBe(sha(want));
  });
});
