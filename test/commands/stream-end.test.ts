// A stream ends with `exit` or with an `error` event that says why, never
// silently (issue 45: one stream of ~15,000 under the soak's mixed load ended
// with its connection cut before `exit`). These cut envd's link to a running
// command's holder from outside, the way a holder drops a link: envd must tell
// the stream's client, then follow the command again.
import { readdirSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { waitFor } from '../helpers/proc.js';
import { makeEnvdDirs, startServer, type TestServer } from '../helpers/server.js';
import { readEvents, type SseEvent } from '../helpers/sse.js';

describe('a stream whose holder link is lost while the command runs', () => {
  let server: TestServer;
  let dirs: ReturnType<typeof makeEnvdDirs>;
  let removeUser = () => {};
  beforeAll(async () => {
    const made = await commandUser();
    removeUser = made.remove;
    dirs = makeEnvdDirs();
    // envd writes the stream itself (no socket lent to the holder): it may still write an event when the link goes.
    server = await startServer({ defaultUser: made.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir, directOutput: false });
  });
  afterAll(async () => {
    await server.close();
    dirs.remove();
    removeUser();
  });

  it('ends with an error event saying to attach again, and the command runs on and can be attached to', async () => {
    const response = await server.call('POST', '/commands/stream', { cmd: 'for i in $(seq 1 100); do echo "line $i"; sleep 0.1; done' });
    expect(response.status).toBe(200);
    const events = readEvents(response);
    const seen: SseEvent[] = [];
    const next = async () => {
      const { value, done } = await events.next();
      if (done) return undefined;
      seen.push(value);
      return value;
    };
    const start = await next();
    expect(start?.event).toBe('start');
    const pid = start!.data.pid as number;
    while ((await next())?.event !== 'stdout');

    // A holder serves one link at a time, the newest: this connection takes it from envd.
    const [id] = readdirSync(join(dirs.stateDir, 'cmds'));
    const intruder = createConnection(join(dirs.stateDir, 'cmds', id!, 'sock'));
    intruder.on('error', () => {});
    try {
      // Read to the end: a cut connection would throw here (fetch: "terminated").
      for (let event = await next(); event; event = await next()) if (event.event === 'exit') break;
      const last = seen.at(-1)!;
      expect(last.event, `events: ${JSON.stringify(seen.map((e) => e.event))}`).toBe('error');
      expect(last.data.message).toMatch(new RegExp(`holder of pid ${pid} .*attach again \\(GET /commands/${pid}/stream\\)`));
    } finally {
      intruder.destroy();
    }

    // envd follows the command again: it is still running, and attaching gets its output and its exit.
    await waitFor(async () => (await server.json('GET', '/commands')).body.processes.some((p: { pid: number; running: boolean }) => p.pid === pid && p.running), 10_000, 'the command listed as running');
    const attach = await server.call('GET', `/commands/${pid}/stream`);
    expect(attach.status).toBe(200);
    const attached: SseEvent[] = [];
    for await (const event of readEvents(attach)) if (event.event !== ':') attached.push(event);
    expect(attached.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 0 } });
    expect(attached.filter((e) => e.event === 'stdout').map((e) => e.data.data).join('')).toContain('line 100\n');
  });
});
