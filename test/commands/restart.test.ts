import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import { findProcesses, startEnvdProcess, waitFor } from '../helpers/proc.js';
import { makeEnvdDirs, startServer, type TestServer } from '../helpers/server.js';
import { readEvents } from '../helpers/sse.js';

// Restarts of envd, in process (`detach` is what SIGHUP does) and as a real kill -9 of the bundle:
// the commands live on with their holders, and the next envd re-adopts them.

let user: Awaited<ReturnType<typeof commandUser>>;
let dirs: ReturnType<typeof makeEnvdDirs>;
let servers: TestServer[] = [];
const markers: string[] = [];

beforeAll(async () => {
  user = await commandUser();
});
afterAll(() => user?.remove());
afterEach(async () => {
  for (const server of servers.splice(0)) await server.close().catch(() => {});
  for (const marker of markers.splice(0)) for (const pid of findProcesses(marker)) process.kill(pid, 'SIGKILL');
  dirs?.remove();
});

const start = async () => {
  const server = await startServer({ defaultUser: user.user.name, stateDir: dirs.stateDir, spoolDir: dirs.spoolDir });
  servers.push(server);
  return server;
};
/** The restart: the old envd lets go of everything (as on SIGHUP or a crash), a new one opens the same directories. */
const restart = async (old: TestServer) => {
  servers = servers.filter((s) => s !== old);
  await old.detach();
  return start();
};
const background = async (server: TestServer, body: Record<string, unknown>) => {
  const { status, body: answer } = await server.json('POST', '/commands', { ...body, background: true });
  expect(status, JSON.stringify(answer)).toBe(200);
  return answer.pid as number;
};

describe('restarting envd', () => {
  it('keeps a printing command alive across the gap and wait returns every line with the real exit code', async () => {
    dirs = makeEnvdDirs();
    const first = await start();
    const marker = `ticker-${process.pid}`;
    markers.push(marker);
    const pid = await background(first, { cmd: `for i in $(seq 1 30); do echo "tick $i"; sleep 0.1; done; exit 7 # ${marker}` });
    await new Promise((r) => setTimeout(r, 600));
    const second = await restart(first);
    // While no envd ran, the command printed on: nothing got SIGPIPE.
    const listed = (await second.json('GET', '/commands')).body.processes;
    expect(listed.map((p: any) => p.pid)).toContain(pid);
    expect(listed.find((p: any) => p.pid === pid)).toMatchObject({ running: true, background: true });
    const { body } = await second.json('GET', `/commands/${pid}/wait`);
    expect(body.stdout).toBe(Array.from({ length: 30 }, (_, i) => `tick ${i + 1}\n`).join(''));
    expect(body.exit_code).toBe(7);
  });

  it('reports the exit code of a command that ended while envd was down', async () => {
    dirs = makeEnvdDirs();
    const first = await start();
    const pid = await background(first, { cmd: 'sleep 0.3; echo bye; exit 5' });
    await first.detach();
    servers = [];
    await new Promise((r) => setTimeout(r, 800));
    const second = await start();
    const listed = (await second.json('GET', '/commands')).body.processes.find((p: any) => p.pid === pid);
    expect(listed).toMatchObject({ running: false, exit_code: 5, reason: 'exited' });
    expect((await second.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: 'bye\n', stderr: '', exit_code: 5, reason: 'exited' });
  });

  it('keeps stdin working across the restart', async () => {
    dirs = makeEnvdDirs();
    const first = await start();
    const pid = await background(first, { cmd: 'cat', stdin: true });
    expect((await first.json('POST', `/commands/${pid}/stdin`, { data: 'before\n' })).status).toBe(200);
    const second = await restart(first);
    expect((await second.json('POST', `/commands/${pid}/stdin`, { data: 'after\n' })).status).toBe(200);
    expect((await second.json('DELETE', `/commands/${pid}/stdin`)).status).toBe(200);
    expect((await second.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: 'before\nafter\n', stderr: '', exit_code: 0, reason: 'exited' });
  });

  it('re-adopts a streamed command: listed, attach replays what came before and follows live, wait has it all', async () => {
    dirs = makeEnvdDirs();
    const first = await start();
    const response = await first.call('POST', '/commands/stream', { cmd: 'for i in 1 2 3 4 5 6 7 8 9 10; do echo "line $i"; sleep 0.1; done' });
    const events = readEvents(response);
    const { value: started } = await events.next();
    expect(started!.event).toBe('start');
    const pid = started!.data.pid as number;
    await events.next(); // the first line arrived: the command runs
    const second = await restart(first);
    // The old envd's client is cut, though its holder may have been writing to the socket: it lets go with the link.
    await expect(
      (async () => {
        for await (const _ of events);
      })(),
    ).rejects.toThrow();
    const attach = await second.call('GET', `/commands/${pid}/stream`);
    expect(attach.status).toBe(200);
    let stdout = '';
    let exit: any;
    for await (const event of readEvents(attach)) {
      if (event.event === 'stdout') stdout += event.data.data;
      if (event.event === 'exit') exit = event.data;
    }
    expect(stdout).toBe(Array.from({ length: 10 }, (_, i) => `line ${i + 1}\n`).join(''));
    expect(exit).toEqual({ exit_code: 0, reason: 'exited' });
    // A streamed command whose client went with the old envd is kept until someone waits for it.
    expect((await second.json('GET', `/commands/${pid}/wait`)).body.stdout).toBe(stdout);
  });

  it('kills the whole tree of a re-adopted command and forgets it', async () => {
    dirs = makeEnvdDirs();
    const first = await start();
    const marker = `readopted-tree-${process.pid}`;
    markers.push(marker);
    const pid = await background(first, { cmd: `(exec -a ${marker}-child sleep 1000) & exec -a ${marker}-shell sleep 1000` });
    await waitFor(() => findProcesses(marker).length >= 2, 5_000, 'the tree to start');
    const second = await restart(first);
    expect((await second.json('DELETE', `/commands/${pid}`)).body).toEqual({ killed: true });
    await waitFor(() => findProcesses(marker).length === 0, 5_000, 'the tree to die');
    expect((await second.json('GET', '/commands')).body.processes).toEqual([]);
  });

  it('still times a command out after a restart', async () => {
    dirs = makeEnvdDirs();
    const first = await start();
    const pid = await background(first, { cmd: 'sleep 100', timeout: 1 });
    const second = await restart(first);
    expect((await second.json('GET', `/commands/${pid}/wait`)).body).toEqual({ stdout: '', stderr: '', exit_code: 124, reason: 'timed_out', timed_out: true });
  });

  it('survives kill -9 of the bundle: a command printing every 100 ms loses nothing across the gap', async () => {
    const own = makeEnvdDirs();
    try {
      const args = ['--state-dir', own.stateDir, '--spool-dir', own.spoolDir, '--default-user', user.user.name];
      const env = { ENVD_ACCESS_TOKEN: 'tok' };
      const call = (url: string, method: string, path: string, body?: unknown) =>
        fetch(url + path, { method, headers: { authorization: 'Bearer tok', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }).then((r) => r.json());
      const first = await startEnvdProcess(args, env);
      const { pid } = await call(first.url, 'POST', '/commands', { cmd: 'for i in $(seq 1 25); do echo "n$i"; sleep 0.1; done; exit 3', background: true });
      await new Promise((r) => setTimeout(r, 400));
      await first.stop('SIGKILL');
      await new Promise((r) => setTimeout(r, 500));
      const second = await startEnvdProcess(args, env);
      try {
        expect((await call(second.url, 'GET', '/commands')).processes.map((p: any) => p.pid)).toContain(pid);
        const result = await call(second.url, 'GET', `/commands/${pid}/wait`);
        expect(result.stdout).toBe(Array.from({ length: 25 }, (_, i) => `n${i + 1}\n`).join(''));
        expect(result.exit_code).toBe(3);
      } finally {
        await second.stop();
      }
    } finally {
      own.remove();
    }
  });
});
