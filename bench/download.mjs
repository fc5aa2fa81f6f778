// download: GET /files/raw of a big file, read to the end by a client, against
// fs.createReadStream of the same file (both served from the page cache after
// the first read, which the warm-up round does). Then, reported, curl reads the
// same download into /dev/null: what envd serves when the reader is not a Node
// process sharing the two CPUs (docs/performance.md). It runs after the figure,
// because each curl forks the bench process, and Node's reads in a process that
// has just forked ran up to 3x slower here.
import { execFile } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { send } from './lib/client.mjs';
import { atLeast, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { interleave, median } from './lib/stats.mjs';
import { makeTempDir, removeTempDir, writeRandomFile } from './lib/temp.mjs';

const GOAL = atLeast(0.85);
const MB = 1e6;
const execFileAsync = promisify(execFile);

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

/** The same GET by curl into /dev/null; undefined when curl is not installed. */
async function downloadWithCurl(server, source, bytes) {
  const url = `http://127.0.0.1:${server.port}/files/raw?path=${encodeURIComponent(source)}`;
  let stdout;
  try {
    ({ stdout } = await execFileAsync('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code} %{size_download} %{time_total}', '-H', `authorization: Bearer ${server.token}`, url]));
  } catch (error) {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  }
  const [status, size, seconds] = stdout.split(' ').map(Number);
  if (status !== 200 || size !== bytes) throw new Error(`curl GET /files/raw: status ${status}, ${size} of ${bytes} bytes`);
  return bytes / MB / seconds;
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
        const rows = [makeRow({ name: 'download', unit: 'MB/s', envd: median(samples.a), baseline: median(samples.b), goal: GOAL, note })];
        const byCurl = [];
        for (let round = 0; round < rounds; round++) byCurl.push(await downloadWithCurl(server, source, bytes));
        if (byCurl[0] !== undefined) {
          rows.push(makeRow({ name: 'download (read by curl)', unit: 'MB/s', envd: median(byCurl), baseline: median(samples.b), note: `${mib} MiB, ${rounds} × curl -o /dev/null after the figure above; baseline: its direct read` }));
        }
        return rows;
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
