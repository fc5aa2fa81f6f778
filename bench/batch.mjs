// batch: 1,000 files of 1 KiB in one POST /files/batch (all or nothing: each
// goes to a temporary file, then all are renamed into place) against the same
// files written directly, one writeFileSync after another — the floor, with
// no atomicity at all. Reported, not judged: the ratio is the price of atomicity.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { postJson } from './lib/client.mjs';
import { makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { interleave, median } from './lib/stats.mjs';
import { makeTempDir, removeTempDir } from './lib/temp.mjs';

const FILES = 1000;
const SIZE = 1024;

function contents(i) {
  return `${i}:`.padEnd(SIZE, 'abcdefghijklmnopqrstuvwxyz0123456789');
}

async function timedMs(fn) {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

export async function run({ quick = false, envd } = {}) {
  const rounds = quick ? 4 : 15;
  const dir = makeTempDir('batch');
  const data = Array.from({ length: FILES }, (_, i) => contents(i));
  // A fresh, existing directory for each side and round, made outside the timing.
  const freshDir = (side, round) => {
    const path = join(dir, `${side}-${round}`);
    rmSync(path, { recursive: true, force: true });
    mkdirSync(path);
    return path;
  };
  try {
    const rows = await withEnvd(
      { envd },
      async (server) => {
        const samples = await interleave({
          rounds,
          warmup: 1,
          minRounds: 2,
          budgetMs: quick ? 6_000 : 60_000,
          a: (round) => {
            const target = freshDir('envd', round);
            const files = data.map((d, i) => ({ path: join(target, `f${i}.txt`), data: d }));
            return timedMs(async () => {
              const result = await postJson(server, '/files/batch', { files });
              if (result.files.length !== FILES) throw new Error(`batch wrote ${result.files.length} files`);
            });
          },
          b: (round) => {
            const target = freshDir('direct', round);
            return timedMs(() => data.forEach((d, i) => writeFileSync(join(target, `f${i}.txt`), d)));
          },
        });
        const note = `${FILES} × 1 KiB, ${samples.rounds} per side; baseline writes in place with no atomicity`;
        return [makeRow({ name: 'batch 1,000 × 1 KiB', unit: 'ms', envd: median(samples.a), baseline: median(samples.b), note })];
      },
      (why) => [missingRow({ name: 'batch 1,000 × 1 KiB', unit: 'ms', note: why })],
    );
    rows.forEach(printRow);
    return rows;
  } finally {
    removeTempDir(dir);
  }
}

await runIfMain(import.meta.url, run);
