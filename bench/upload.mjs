// upload: PUT /files/raw of a big file against fs.createWriteStream of the same
// bytes into the same directory, and envd's peak RSS growth while it receives
// them (sampled from /proc every 20 ms): the upload must never sit in memory.
import { execFileSync } from 'node:child_process';
import { createReadStream, createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { send } from './lib/client.mjs';
import { atLeast, atMost, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { rssBytes, sampleRss } from './lib/envd-process.mjs';
import { interleave, median, round } from './lib/stats.mjs';
import { makeTempDir, removeTempDir, writeRandomFile } from './lib/temp.mjs';
import { readSource } from './lib/source.mjs';

const GOAL = atLeast(0.85);
const RSS_GOAL = atMost(64, 'MiB');
const MB = 1e6;
const MIB = 1024 * 1024;

/**
 * Before each timed write: the previous one's dirty pages (64-500 MiB that
 * the unflushed direct write leaves behind) are on disk, so that neither side
 * pays for the other's writeback, and envd's fsync does not wait behind it.
 */
function settleDisk() {
  execFileSync('sync');
}

async function uploadThroughEnvd(server, source, target, bytes) {
  rmSync(target, { force: true });
  settleDisk();
  const start = performance.now();
  const { status, body } = await send(server, 'PUT', `/files/raw?path=${encodeURIComponent(target)}`, {
    body: readSource(source),
    headers: { 'content-type': 'application/octet-stream', 'content-length': bytes },
  });
  const seconds = (performance.now() - start) / 1000;
  if (status !== 200 || JSON.parse(body).size !== bytes) throw new Error(`PUT /files/raw answered ${status}: ${body.slice(0, 300)}`);
  return bytes / MB / seconds;
}

/**
 * The direct write: createReadStream and createWriteStream with their defaults (the figure's baseline
 * since it began), or, for the note, read in 1 MiB chunks and flushed (fsync), as envd's upload is.
 */
async function writeDirect(source, target, bytes, { chunked = false, flush = false } = {}) {
  rmSync(target, { force: true });
  settleDisk();
  const start = performance.now();
  await pipeline(chunked ? readSource(source) : createReadStream(source), createWriteStream(target, { flush }));
  return bytes / MB / ((performance.now() - start) / 1000);
}

export async function run({ quick = false, envd } = {}) {
  const mib = quick ? 64 : 500;
  const bytes = mib * MIB;
  const rounds = quick ? 3 : 3;
  const dir = makeTempDir('upload');
  // ENVD_BENCH_UPLOAD_DIR=/dev/shm writes both sides into tmpfs: what envd adds, without the disk's writeback.
  const into = process.env.ENVD_BENCH_UPLOAD_DIR ? mkdtempSync(join(process.env.ENVD_BENCH_UPLOAD_DIR, 'envd-upload-bench-')) : dir;
  const names = ['upload', 'upload peak RSS growth'];
  try {
    const source = join(dir, 'source.bin');
    writeRandomFile(source, bytes);
    const rows = await withEnvd(
      { envd },
      async (server) => {
        const idle = rssBytes(server.pid);
        const rss = sampleRss(server.pid, 20);
        let samples;
        let peak;
        // A third side, for the reader only: the direct write read in 1 MiB chunks and flushed to disk
        // (fsync before close), as a durable atomic upload has to be.
        const flushed = [];
        try {
          samples = await interleave({
            rounds,
            warmup: quick ? 0 : 1,
            a: () => uploadThroughEnvd(server, source, join(into, 'via-envd.bin'), bytes),
            b: async () => {
              const plain = await writeDirect(source, join(into, 'direct.bin'), bytes);
              flushed.push(await writeDirect(source, join(into, 'direct-flushed.bin'), bytes, { chunked: true, flush: true }));
              return plain;
            },
          });
        } finally {
          peak = rss.stop();
        }
        const note = `${mib} MiB${quick ? ' (--quick; the full run uploads 500 MiB)' : ''}, ${rounds} per side, into ${into === dir ? 'the temp dir' : into}; envd's client reads 1 MiB chunks; direct write in 1 MiB chunks with fsync: ${round(median(flushed))} MB/s`;
        return [
          makeRow({ name: names[0], unit: 'MB/s', envd: median(samples.a), baseline: median(samples.b), goal: GOAL, note }),
          makeRow({ name: names[1], unit: 'MiB', envd: (peak - idle) / MIB, ratio: null, goal: RSS_GOAL, note: `peak VmRSS over the uploads minus VmRSS before` }),
        ];
      },
      (why) => [missingRow({ name: names[0], unit: 'MB/s', goal: GOAL, note: why }), missingRow({ name: names[1], unit: 'MiB', goal: RSS_GOAL, note: why })],
    );
    rows.forEach(printRow);
    return rows;
  } finally {
    if (into !== dir) rmSync(into, { recursive: true, force: true });
    removeTempDir(dir);
  }
}

await runIfMain(import.meta.url, run);
