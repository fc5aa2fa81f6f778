// Keystroke echo round trip on a terminal: POST /commands/{pid}/stdin with one
// character → that character echoed back on the attach stream, p50 and p99.
// The terminal runs `cat`, so the echo is the terminal's own (as in a shell).
import { request } from 'node:http';
import { postJson, send } from './lib/client.mjs';
import { atMost, makeRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { percentile } from './lib/stats.mjs';

const GOAL = atMost(5, 'ms');
// Commands run as a plain user: root's login shell here runs pyenv's rehash under a lock (README, Performance).
const BENCH_USER = 'nobody';

export async function run({ quick = false, envd } = {}) {
  const rounds = quick ? 100 : 500;
  const rows = await withEnvd(
    { envd },
    async (server) => {
      // cat's own copy goes to /dev/null: on the terminal it could join the next keystroke's echo in one
      // event. `ready` says -icanon is set: a key typed before that would reach cat only later.
      const { pid } = await postJson(server, '/commands', { cmd: 'stty -icanon; echo ready; exec cat >/dev/null', pty: { cols: 80, rows: 24 }, background: true, user: BENCH_USER });
      let seen = '';
      let waiting;
      const attach = request({ host: '127.0.0.1', port: server.port, path: `/commands/${pid}/stream`, agent: false, headers: { authorization: `Bearer ${server.token}` } });
      attach.end();
      const res = await new Promise((resolve) => attach.once('response', resolve));
      res.setEncoding('utf8');
      res.on('data', (text) => {
        seen += text;
        if (waiting && seen.includes(waiting.mark)) waiting.resolve();
      });
      const samples = [];
      // A figure that waits forever tells nothing: each echo (and the ready line) gets 5 s.
      const arrival = (mark) =>
        new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`keystroke: no ${mark} on the stream within 5 s (got ${JSON.stringify(seen.slice(-200))})`)), 5_000);
          waiting = { mark, resolve: () => (clearTimeout(timer), resolve()) };
          if (seen.includes(mark)) waiting.resolve();
        });
      try {
        await arrival('ready');
        for (let i = 0; i < rounds + 10; i++) {
          const mark = String.fromCharCode(97 + (i % 26));
          seen = '';
          const echoed = arrival(`"data":"${mark}"`);
          const start = performance.now();
          await postJson(server, `/commands/${pid}/stdin`, { data: mark });
          await echoed;
          if (i >= 10) samples.push(performance.now() - start);
        }
      } finally {
        attach.destroy();
        await send(server, 'DELETE', `/commands/${pid}`);
      }
      const note = `${rounds} keystrokes, one at a time, over loopback (the stdin POST answered, then the echo on the stream)`;
      return [
        makeRow({ name: 'keystroke echo p50', unit: 'ms', envd: percentile(samples, 0.5), goal: GOAL, note }),
        makeRow({ name: 'keystroke echo p99', unit: 'ms', envd: percentile(samples, 0.99), note }),
      ];
    },
    (why) => [makeRow({ name: 'keystroke echo p50', unit: 'ms', envd: null, goal: GOAL, note: why })],
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
