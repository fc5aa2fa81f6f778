// download: GET /files/raw of a big file, read to the end by a client, against
// fs.createReadStream of the same file (both served from the page cache after
// the first read, which the warm-up round does).
import { createReadStream } from 'node:fs';
import { join } from 'node:path';
import { send } from './lib/client.mjs';
import { atLeast, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { interleave, median } from './lib/stats.mjs';
import { makeTempDir, removeTempDir, writeRandomFile } from './lib/temp.mjs';

const GOAL = atLeast(0.85);
const MB = 1e6;

async function countBytes(stream) {
  let total = 0;
  for await (const chunk of stream) total += chunk.length;
  return total;
}

async function downloadThroughEnvd(server, source, bytes) {
  const start = performance.now();
  const res = await send(server, 'GET', `/files/raw?path=${encodeURIComponent(source)}`, { read: false });
  if (res.statusCode !== 200) throw new Error(`GET /files/raw answered ${res.statusCode}`);
  const got = await countBytes(res);
  if (got !== bytes) throw new Error(`GET /files/raw gave ${got} of ${bytes} bytes`);
  return bytes / MB / ((performance.now() - start) / 1000);
}

async function readDirect(source, bytes) {
  const start = performance.now();
  const got = await countBytes(createReadStream(source));
  if (got !== bytes) throw new Error(`read ${got} of ${bytes} bytes`);
  return bytes / MB / ((performance.now() - start) / 1000);
}

export async function run({ quick = false, envd } = {}) {
  const mib = quick ? 64 : 500;
  const bytes = mib * 1024 * 1024;
  const rounds = quick ? 3 : 5;
  const dir = makeTempDir('download');
  try {
    const source = join(dir, 'source.bin');
    writeRandomFile(source, bytes);
    const rows = await withEnvd(
      { envd },
      async (server) => {
        const samples = await interleave({ rounds, warmup: 1, a: () => downloadThroughEnvd(server, source, bytes), b: () => readDirect(source, bytes) });
        const note = `${mib} MiB${quick ? ' (--quick; the full run reads 500 MiB)' : ''}, ${rounds} per side`;
        return [makeRow({ name: 'download', unit: 'MB/s', envd: median(samples.a), baseline: median(samples.b), goal: GOAL, note })];
      },
      (why) => [missingRow({ name: 'download', unit: 'MB/s', goal: GOAL, note: why })],
    );
    rows.forEach(printRow);
    return rows;
  } finally {
    removeTempDir(dir);
  }
}

await runIfMain(import.meta.url, run);
