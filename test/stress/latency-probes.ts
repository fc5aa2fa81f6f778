import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

/**
 * GET /health (every 50 ms) and POST /commands `true` (every 200 ms), timed
 * from a process of their own. Timed from the test's, whose event loop runs
 * the hundreds of transfers of the load, they measured its delays as well as
 * envd's: tens to hundreds of milliseconds at p99 on a loaded machine.
 */
const SCRIPT = `
const [url, token] = process.argv.slice(1);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const out = { health: [], command: [], failed: [] };
let probing = true;
async function loop(kind, everyMs) {
  while (probing) {
    const started = performance.now();
    try {
      const response = kind === 'health'
        ? await fetch(url + '/health', { headers: { authorization: 'Bearer ' + token }, signal: AbortSignal.timeout(10000) })
        : await fetch(url + '/commands', { method: 'POST', headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' }, body: '{"cmd":"true"}', signal: AbortSignal.timeout(10000) });
      await response.arrayBuffer();
      if (response.status !== 200) out.failed.push(kind + ' ' + response.status);
    } catch (error) {
      out.failed.push(kind + ' ' + error.name);
    }
    out[kind].push(performance.now() - started);
    await sleep(everyMs);
  }
}
const loops = [loop('health', 50), loop('command', 200)];
process.stdin.once('end', async () => {
  probing = false;
  await Promise.all(loops);
  process.stdout.write(JSON.stringify(out) + '\\n');
});
process.stdin.resume();
process.stdout.write('started\\n');
`;

export interface ProbeTimes {
  health: number[];
  command: number[];
  /** Probes that did not answer 200: "health 503", "command TimeoutError". */
  failed: string[];
}

/** Starts the probes against envd at `url`; stop() ends them and resolves with their times. */
export async function startLatencyProbes(url: string, token: string): Promise<{ stop(): Promise<ProbeTimes> }> {
  const child = spawn(process.execPath, ['-e', SCRIPT, url, token], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.value !== 'started') throw new Error(`the latency probes did not start: ${String(first.value)}`);
  return {
    async stop() {
      child.stdin!.end();
      const result = await lines.next();
      return JSON.parse(String(result.value)) as ProbeTimes;
    },
  };
}
