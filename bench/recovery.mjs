// Footprint under and after load (issue 29 §3–4), on dist/envd as guests run it:
// - the peak of 100 stream clients that stop reading a fast command (goal ≤ idle + 64 MiB);
// - RSS 10 s after each load ended (goal ≤ idle + 16 MiB): a 1,000-command kill storm,
//   8 concurrent 64 MiB transfers (4 uploads, 4 downloads), and those 100 stalled streams.
// Idle is read after a warm-up (a few commands, one upload and one download), since
// the first use of each maps code once and keeps it (bench/memory.mjs says which).
import { join } from 'node:path';
import { postJson, send } from './lib/client.mjs';
import { stalledStream } from './lib/stalled-stream.mjs';
import { atMost, makeRow, printRow, runIfMain } from './lib/figure.mjs';
import { rssBytes, sampleRss, startEnvd } from './lib/envd-process.mjs';
import { runConcurrently } from './lib/stats.mjs';
import { makeTempDir, removeTempDir, writeRandomFile } from './lib/temp.mjs';
import { readSource } from './lib/source.mjs';

const MIB = 1024 * 1024;
const BENCH_USER = 'nobody';
const RECOVERY_MS = 10_000;
const STALLED_STREAMS = 100;
const TRANSFER_BYTES = 64 * MIB;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));


async function upload(envd, source, target) {
  const { status, body } = await send(envd, 'PUT', `/files/raw?path=${encodeURIComponent(target)}`, {
    body: readSource(source),
    headers: { 'content-type': 'application/octet-stream', 'content-length': TRANSFER_BYTES },
  });
  if (status !== 200) throw new Error(`upload answered ${status}: ${body.slice(0, 200)}`);
}

async function download(envd, path) {
  const res = await send(envd, 'GET', `/files/raw?path=${encodeURIComponent(path)}`, { read: false });
  let bytes = 0;
  for await (const chunk of res) bytes += chunk.length;
  if (bytes !== TRANSFER_BYTES) throw new Error(`download gave ${bytes} bytes`);
}

async function killStorm(envd, count) {
  const pids = [];
  await runConcurrently(count, 16, async () => {
    pids.push((await postJson(envd, '/commands', { cmd: 'sleep 600', background: true, user: BENCH_USER })).pid);
  });
  await runConcurrently(pids.length, 16, (i) => send(envd, 'DELETE', `/commands/${pids[i]}`));
}

/** A fresh envd, warmed up (a few commands, one upload and one download: the first use of each maps code once and keeps it), and its idle RSS. */
async function warmEnvd(dir, source) {
  // BENCH_PRELOAD (a script to load into envd, for diagnosis) needs the bundle under node.
  const envd = await startEnvd({ executable: !process.env.BENCH_PRELOAD });
  await runConcurrently(8, 4, () => postJson(envd, '/commands', { cmd: 'true', user: BENCH_USER }));
  await upload(envd, source, join(dir, 'warm.bin'));
  await download(envd, join(dir, 'warm.bin'));
  await sleep(RECOVERY_MS);
  return { envd, idle: rssBytes(envd.pid) };
}

/** Each load on its own envd, so that a figure says what that load leaves behind. */
async function onFreshEnvd(dir, source, load) {
  const { envd, idle } = await warmEnvd(dir, source);
  try {
    const sampler = sampleRss(envd.pid);
    await load(envd);
    const peak = sampler.stop();
    await sleep(RECOVERY_MS);
    return { idle: idle / MIB, peak: (peak - idle) / MIB, after: (rssBytes(envd.pid) - idle) / MIB };
  } finally {
    await envd.stop();
  }
}

export async function run({ quick = false } = {}) {
  const storm = quick ? 200 : 1000;
  const dir = makeTempDir('recovery');
  try {
    const source = join(dir, 'source.bin');
    writeRandomFile(source, TRANSFER_BYTES);
    const killed = await onFreshEnvd(dir, source, (envd) => killStorm(envd, storm));
    const moved = await onFreshEnvd(dir, source, (envd) =>
      Promise.all([
        ...[0, 1, 2, 3].map((i) => upload(envd, source, join(dir, `up-${i}.bin`))),
        ...[0, 1, 2, 3].map(() => download(envd, source)),
      ]),
    );
    const streams = await onFreshEnvd(dir, source, async (envd) => {
      const clients = [];
      for (let i = 0; i < STALLED_STREAMS; i++) clients.push(await stalledStream(envd, 'yes "stalled stream output line"', BENCH_USER));
      await sleep(3_000); // every command blocked on its pipe
      clients.forEach((client) => client.close());
    });
    const goal16 = atMost(16, 'MiB');
    const idle = (figure) => `idle ${figure.idle.toFixed(1)} MiB`;
    return [
      makeRow({ name: `RSS peak, ${STALLED_STREAMS} stalled streams`, unit: 'MiB', envd: streams.peak, baseline: streams.idle, ratio: null, goal: atMost(64, 'MiB'), note: `above ${idle(streams)}` }),
      makeRow({ name: `RSS 10 s after a ${storm}-command kill storm`, unit: 'MiB', envd: killed.after, baseline: killed.idle, ratio: null, goal: goal16, note: `above ${idle(killed)}; peak +${killed.peak.toFixed(1)} MiB` }),
      makeRow({ name: 'RSS 10 s after 8 × 64 MiB transfers', unit: 'MiB', envd: moved.after, baseline: moved.idle, ratio: null, goal: goal16, note: `4 uploads + 4 downloads at once, above ${idle(moved)}; peak +${moved.peak.toFixed(1)} MiB` }),
      makeRow({ name: `RSS 10 s after ${STALLED_STREAMS} stalled streams`, unit: 'MiB', envd: streams.after, baseline: streams.idle, ratio: null, goal: goal16, note: `above ${idle(streams)}` }),
    ];
  } finally {
    removeTempDir(dir);
  }
}

runIfMain(import.meta.url, async (opts) => (await run(opts)).forEach(printRow));
