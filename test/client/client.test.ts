import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EnvdClient, EnvdError, type CommandEvent } from '../../src/client/index.js';
import { commandUser } from '../helpers/command-user.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

let server: TestServer;

/** Until the command has ended, without collecting it. */
async function untilEnded(c: EnvdClient, pid: number): Promise<void> {
  while ((await c.commands.list()).some((p) => p.pid === pid && p.running)) await new Promise((resolve) => setTimeout(resolve, 20));
}

let client: EnvdClient;
let dir: string;
/** Who runs the commands this file kills within ~100 ms of their start: a plain user when root (see below). */
let killedAs: string;
let removeUser = () => {};

beforeAll(async () => {
  // A root login shell killed while it starts leaves pyenv's lock behind on this host, and every later
  // root login shell then waits 60 s for it (two unit runs timed out a later test that way).
  const made = await commandUser();
  killedAs = made.user.name;
  removeUser = made.remove;
  server = await startServer();
  client = new EnvdClient({ url: `${server.url}/`, token: server.token });
  dir = mkdtempSync(join(tmpdir(), 'envd-client-'));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await server.close();
  removeUser();
});

describe('the typed client on a real envd', () => {
  it('runs a command in the foreground', async () => {
    const result = await client.commands.run({ cmd: 'echo hi; exit 3' });
    expect(result).toMatchObject({ stdout: 'hi\n', exit_code: 3 });
  });

  it('streams events in order and ends with exit', async () => {
    const events: CommandEvent[] = [];
    for await (const event of client.commands.stream({ cmd: 'echo a; echo b >&2; exit 5' })) events.push(event);
    expect(events[0]!.event).toBe('start');
    expect(events.at(-1)).toMatchObject({ event: 'exit', data: { exit_code: 5 } });
    const out = events.filter((e) => e.event === 'stdout').map((e) => (e.data as { data: string }).data).join('');
    expect(out).toBe('a\n');
  });

  it('resumes an attach from an id with no byte twice and none skipped', async () => {
    const { pid } = await client.commands.start({ cmd: 'for i in $(seq 1 50); do echo line$i; done' });
    // Ended but not collected: a wait would forget the pid (the spec), and there would be nothing to attach to.
    await untilEnded(client, pid);
    let firstId: string | undefined;
    let head = '';
    for await (const event of client.commands.attach(pid)) {
      if (event.event === 'stdout') {
        head = event.data.data;
        firstId = event.id;
        break;
      }
    }
    let tail = '';
    for await (const event of client.commands.attach(pid, { from: firstId! })) if (event.event === 'stdout') tail += event.data.data;
    const expected = Array.from({ length: 50 }, (_, i) => `line${i + 1}\n`).join('');
    expect(head + tail).toBe(expected);
  });

  it('pipes stdin, signals, waits with a timeout (408) and kills', async () => {
    const { pid } = await client.commands.start({ cmd: 'cat', stdin: true });
    await client.commands.sendStdin(pid, 'hello\n');
    await client.commands.closeStdin(pid);
    expect((await client.commands.wait(pid)).stdout).toBe('hello\n');
    const sleeper = await client.commands.start({ cmd: 'sleep 30', user: killedAs });
    await expect(client.commands.wait(sleeper.pid, { timeout_ms: 50 })).rejects.toMatchObject({ status: 408 });
    expect((await client.commands.list()).some((p) => p.pid === sleeper.pid)).toBe(true);
    await client.commands.signal(sleeper.pid, 'SIGTERM');
    expect((await client.commands.wait(sleeper.pid)).signal).toBe('SIGTERM');
    // Waited for: forgotten, so there is nothing left to kill.
    expect(await client.commands.kill(sleeper.pid)).toBe(false);
    const other = await client.commands.start({ cmd: 'sleep 30', user: killedAs });
    expect(await client.commands.kill(other.pid)).toBe(true);
  });

  it('reads and writes files and lists them', async () => {
    const path = join(dir, 'x', 'a.txt');
    expect(await client.files.write({ path, data: 'abc' })).toEqual({ path, size: 3, sha256: 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad' }); // sha256('abc')
    expect((await client.files.read(path)).data).toBe('abc');
    await client.files.upload(path, new Uint8Array([1, 2, 3, 4]));
    expect(new Uint8Array(await (await client.files.download(path)).arrayBuffer())).toEqual(new Uint8Array([1, 2, 3, 4]));
    expect(await client.files.exists(path)).toBe(true);
    expect((await client.files.list(join(dir, 'x'))).map((e) => e.name)).toEqual(['a.txt']);
    expect((await client.files.mkdir(join(dir, 'y'))).created).toBe(true);
    expect((await client.files.rename(path, join(dir, 'y', 'b.txt'))).name).toBe('b.txt');
    expect(await client.files.remove(join(dir, 'y'))).toBe(true);
  });

  it('gives a typed EnvdError: status and the server message', async () => {
    const error = await client.files.read('/definitely/not/here').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EnvdError);
    expect(error).toMatchObject({ status: 404 });
    const bad = new EnvdClient({ url: server.url, token: 'wrong' });
    await expect(bad.commands.list()).rejects.toMatchObject({ status: 401 });
    const nowhere = new EnvdClient({ url: 'http://127.0.0.1:1' });
    await expect(nowhere.lifecycle.health()).rejects.toMatchObject({ status: 0 });
  });

  it('stops on an AbortSignal', async () => {
    const controller = new AbortController();
    const pending = client.commands.run({ cmd: 'sleep 30', user: killedAs }, { signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    await expect(pending).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('watches a directory', async () => {
    const controller = new AbortController();
    const seen: string[] = [];
    const watching = (async () => {
      try {
        for await (const event of client.files.watch({ path: dir }, { signal: controller.signal })) {
          if (event.event === 'ready') await client.files.write({ path: join(dir, 'w.txt'), data: '1' });
          if (event.event === 'change') {
            seen.push(event.data.path);
            if (event.data.path === join(dir, 'w.txt')) controller.abort();
          }
        }
      } catch (error) {
        if ((error as Error).name !== 'AbortError') throw error;
      }
    })();
    await watching;
    expect(seen).toContain(join(dir, 'w.txt'));
  });
});
