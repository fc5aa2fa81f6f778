// PUT /files/archive against generated bad input (issue 27 §3): random bytes,
// valid archives with bytes flipped or cut anywhere, gzip of both, and
// hand-made hostile entries. Every answer is a 2xx or a 4xx with a message,
// never a 5xx or a hang; a refused archive leaves nothing (no target, no
// .envd-archive-* temp tree); envd's descriptors come back to where they were.
import fc from 'fast-check';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROPERTY_SEED } from '../helpers/output-integrity.js';
import { report, settleFds, startStressEnvd, type StressEnvd } from './harness.js';

let target: StressEnvd;
const statuses = new Map<number, number>();
beforeAll(async () => {
  target = await startStressEnvd();
});
afterAll(async () => {
  report('archive fuzz', { statuses: JSON.stringify(Object.fromEntries(statuses)) });
  await target?.stop();
});

async function archiveOf(entries: Array<{ name: string; type?: string; linkname?: string; body?: string }>): Promise<Buffer> {
  const tar = pack();
  const chunks: Buffer[] = [];
  tar.on('data', (chunk) => chunks.push(chunk as Buffer));
  const done = new Promise<void>((resolve) => tar.on('end', () => resolve()));
  for (const { body, ...header } of entries) {
    const done = (error?: Error | null) => (error ? reject(error) : resolve());
    let resolve!: () => void;
    let reject!: (error: Error) => void;
    const written = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
    // Only files have a body; every other kind is its header alone.
    if (header.type === 'file') tar.entry({ ...header, mode: 0o644 } as never, body ?? '', done);
    else tar.entry({ ...header, mode: 0o644 } as never, done);
    await written;
  }
  tar.finalize();
  await done;
  return Buffer.concat(chunks);
}

const name = fc.oneof(
  // Few names, so that entries meet: a file where a directory was, a child of a file, the same name twice.
  fc.constantFrom('a.txt', 'd', 'd/e.txt', 'd/e.txt/f', '../x', '/abs', 'd/../../x', './ok', 'a/./b', '..', '.', '', 'l/inside.txt', 'a'.repeat(300)),
  fc.string({ minLength: 1, maxLength: 40 }),
);
const entry = fc.record({
  name,
  type: fc.constantFrom('file', 'directory', 'symlink', 'link', 'fifo', 'character-device'),
  linkname: fc.constantFrom('a.txt', '../etc', '/etc/passwd', 'd', '.', 'missing'),
  // Past 256 KiB a file is written as it comes rather than gathered: both paths.
  body: fc.oneof(fc.string({ maxLength: 200 }), fc.constant('x'.repeat(300_000))),
});

let case_ = 0;
async function putArchive(body: Buffer): Promise<void> {
  const dest = join(target.dir, `t${case_++}`);
  const res = await target.call('PUT', `/files/archive?path=${encodeURIComponent(dest)}`, undefined, { body: new Uint8Array(body), headers: { 'content-type': 'application/octet-stream' } });
  statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
  const answer = await res.json();
  expect(res.status, `${JSON.stringify(answer)} ${target.envd.lines.filter((l) => l.includes('"level":50')).slice(-1)}`).toBeLessThan(500);
  if (res.status >= 400) {
    expect(typeof answer.message).toBe('string');
    expect(existsSync(dest)).toBe(false);
  } else {
    rmSync(dest, { recursive: true, force: true });
  }
  expect(readdirSync(target.dir).filter((n) => n.startsWith('.envd-archive-'))).toEqual([]);
}

describe('PUT /files/archive under generated bad input', () => {
  it('answers random bytes, cut and flipped archives, and hostile entries with a 2xx or a clear 4xx, leaving nothing', async () => {
    // One upload first: user-path.ts keeps `/` open for every walk after the first, for envd's life.
    await putArchive(await archiveOf([{ name: 'warm.txt', type: 'file', body: 'x' }]));
    const fdsBefore = target.fds();
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.uint8Array({ minLength: 0, maxLength: 4096 }).map((bytes) => Buffer.from(bytes)),
          fc.tuple(fc.array(entry, { minLength: 1, maxLength: 6 }), fc.nat(), fc.nat(255), fc.boolean(), fc.boolean()).map(([entries, at, value, cut, gzip]) => ({ entries, at, value, cut, gzip })),
        ),
        async (input) => {
          if (Buffer.isBuffer(input)) return putArchive(input);
          let bytes = await archiveOf(input.entries);
          const at = input.at % Math.max(1, bytes.length);
          if (input.cut) bytes = bytes.subarray(0, at);
          else if (input.at % 3 === 0) bytes = Buffer.from(bytes).fill(input.value, at, at + 1);
          await putArchive(input.gzip ? gzipSync(bytes) : bytes);
        },
      ),
      { numRuns: Number(process.env.ENVD_FUZZ_RUNS ?? 300), seed: PROPERTY_SEED },
    );
    expect(await settleFds(target, fdsBefore)).toBeLessThanOrEqual(fdsBefore + 2);
  });
});
