import { readdirSync, readFileSync } from 'node:fs';
import { getPriority } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvdExecutable, waitFor, type EnvdProcess } from './helpers/proc.js';
import { HELPER_THREAD_NICE } from '../src/thread-priority.js';

/** Each of envd's threads: its name and nice value (/proc/PID/task/TID/stat, field 19). */
function threads(pid: number): { name: string; nice: number; main: boolean }[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
    try {
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return [{ name, nice: Number(fields[16]), main: Number(tid) === pid }];
    } catch {
      return []; // ended while we looked
    }
  });
}

const TOKEN = 'thread-priority-test-token';

const helpers = (pid: number) => threads(pid).filter((t) => t.name === 'libuv-worker' || t.name === 'V8Worker');

async function commandNice(envd: EnvdProcess): Promise<string> {
  const response = await fetch(`${envd.url}/commands`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'nice' }) });
  expect(response.status).toBe(200);
  const body = (await response.json()) as { stdout: string };
  return body.stdout.trim();
}

describe('helper threads niced below the main thread (dist/envd)', () => {
  let envd: EnvdProcess;
  beforeAll(async () => {
    envd = await startEnvdExecutable([], { ENVD_ACCESS_TOKEN: TOKEN });
  }, 30_000);
  afterAll(async () => {
    await envd?.stop();
  });

  it("libuv's pool and V8's workers run HELPER_THREAD_NICE below the main thread; the commands it starts at the main thread's priority", async () => {
    const pid = envd.child.pid!;
    // As this test runs (nice -n 15 npm test included): the helpers' nice is capped at 19.
    const base = getPriority(0);
    const niced = Math.min(19, base + HELPER_THREAD_NICE);
    await waitFor(() => helpers(pid).some((t) => t.name === 'libuv-worker') && helpers(pid).every((t) => t.nice === niced), 10_000, 'helper threads niced');
    expect(helpers(pid).filter((t) => t.name === 'libuv-worker').length).toBeGreaterThanOrEqual(4);
    expect(threads(pid).find((t) => t.main)?.nice).toBe(base);
    expect(await commandNice(envd)).toBe(String(base));
  });
});

describe('ENVD_HELPER_THREAD_NICE=0 (dist/envd)', () => {
  let envd: EnvdProcess;
  beforeAll(async () => {
    envd = await startEnvdExecutable([], { ENVD_ACCESS_TOKEN: TOKEN, ENVD_HELPER_THREAD_NICE: '0' });
  }, 30_000);
  afterAll(async () => {
    await envd?.stop();
  });

  it("leaves every thread at the main thread's priority", async () => {
    const pid = envd.child.pid!;
    await commandNice(envd); // the pool has started by now
    expect(threads(pid).map((t) => t.nice)).toEqual(threads(pid).map(() => getPriority(0)));
  });
});
