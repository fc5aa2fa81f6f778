// Resumed stream (issue 27): a client attached to a command printing 64 MiB
// of numbered lines is cut halfway and comes back with the id of the last
// event it got (Last-Event-ID). The figure is the bytes it lost or got twice,
// found by content (every line is its own number), against 0; reported beside
// it: how long the reconnect took to its first event.
import { createHash } from 'node:crypto';
import { send } from './lib/client.mjs';
import { atMost, makeRow, missingRow, printRow, runIfMain, withEnvd } from './lib/figure.mjs';
import { COMMAND_USER } from './lib/spawn-direct.mjs';

const LINE = 16; // '%015.0f\n'

/** Reads an attach stream until it ends or `stopAfter` bytes of stdout came; calls onText for each event's text. */
function attach(server, pid, lastEventId, stopAfter, onText) {
  const controller = new AbortController();
  return send(server, 'GET', `/commands/${pid}/stream`, { read: false, signal: controller.signal, headers: lastEventId ? { 'last-event-id': lastEventId } : {} }).then(
    (res) =>
      new Promise((resolve, reject) => {
        let buffer = '';
        let got = 0;
        let id;
        let exit = false;
        const done = (cut) => resolve({ id, got, exit, cut });
        res.setEncoding('utf8');
        res.on('data', (chunk) => {
          buffer += chunk;
          for (let end = buffer.indexOf('\n\n'); end !== -1; end = buffer.indexOf('\n\n')) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = /^event: (\w+)/.exec(block)?.[1];
            if (event === 'stdout') {
              const text = JSON.parse(block.slice(block.indexOf('data: ') + 6)).data;
              id = /\nid: (\S+)/.exec(block)[1];
              got += text.length;
              onText(text);
              if (got >= stopAfter) {
                // The client goes away mid-stream, as a laptop's does.
                res.removeAllListeners('data');
                controller.abort();
                return done(true);
              }
            } else if (event === 'exit') exit = true;
          }
        });
        res.on('end', () => done(false));
        res.on('error', (error) => (error.name === 'AbortError' ? done(true) : reject(error)));
      }),
  );
}

export async function run({ quick = false, envd } = {}) {
  const mib = quick ? 16 : 64;
  const lines = (mib * 1024 * 1024) / LINE;
  const name = `resumed stream (${mib} MiB, cut halfway)`;
  const goal = atMost(0, 'bytes');
  const rows = await withEnvd(
    { envd },
    async (server) => {
      const { status, body } = await send(server, 'POST', '/commands', { body: { cmd: `seq -f '%015.0f' 1 ${lines}`, background: true, user: COMMAND_USER.name } });
      if (status !== 200) throw new Error(`POST /commands answered ${status}: ${body}`);
      const { pid } = JSON.parse(body);
      const hash = createHash('sha256');
      let text = '';
      let counted = 0;
      let expectedNext = 1;
      let lost = 0;
      let repeated = 0;
      // Checks every whole line as it comes: its number must follow the last one.
      const onText = (piece) => {
        text += piece;
        hash.update(piece);
        counted += piece.length;
        let end;
        let at = 0;
        while ((end = text.indexOf('\n', at)) !== -1) {
          const n = Number(text.slice(at, end));
          if (n > expectedNext) lost += (n - expectedNext) * LINE;
          else if (n < expectedNext) repeated += LINE;
          expectedNext = Math.max(expectedNext, n + 1);
          at = end + 1;
        }
        text = text.slice(at);
      };
      const first = await attach(server, pid, undefined, (mib * 1024 * 1024) / 2, onText);
      if (!first.cut) throw new Error('the stream ended before the cut');
      const reconnected = performance.now();
      let firstEventMs;
      const second = await attach(server, pid, first.id, Infinity, (piece) => {
        firstEventMs ??= performance.now() - reconnected;
        onText(piece);
      });
      if (!second.exit) throw new Error('the resumed stream did not end with exit');
      await send(server, 'DELETE', `/commands/${pid}`);
      lost += (lines + 1 - expectedNext) * LINE;
      const expected = createHash('sha256');
      for (let i = 1; i <= lines; i += 65536) expected.update(Array.from({ length: Math.min(65536, lines - i + 1) }, (_, k) => `${String(i + k).padStart(15, '0')}\n`).join(''));
      const same = hash.digest('hex') === expected.digest('hex') && counted === lines * LINE;
      return [
        makeRow({
          name,
          unit: 'bytes',
          envd: same ? lost + repeated : Math.max(lost + repeated, 1),
          goal,
          note: `${lost} lost, ${repeated} repeated, sha256 ${same ? 'equal' : 'DIFFERENT'}; cut after ${first.got} bytes at id ${first.id}, reconnect to its first event ${firstEventMs?.toFixed(1)} ms`,
        }),
      ];
    },
    (why) => [missingRow({ name, unit: 'bytes', goal, note: why })],
  );
  rows.forEach(printRow);
  return rows;
}

await runIfMain(import.meta.url, run);
