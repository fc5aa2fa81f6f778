import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HolderSpawner } from '../../src/commands/holder-spawner.js';
import { HttpError } from '../../src/errors.js';
import { createLogger } from '../../src/logger.js';
import { HOLDER_BINARY, USAGE_BYTES, afterThisTest, holderArgs, makeTempRoot, useHolders } from '../helpers/holder.js';
import { countZombieChildren, waitFor } from '../helpers/proc.js';

useHolders();

const log = createLogger('silent');

/** A spawner of the test's own (closed after it), and a state dir for the holders it starts. */
function setup() {
  const root = makeTempRoot();
  const usageFile = join(root, 'usage');
  writeFileSync(usageFile, Buffer.alloc(USAGE_BYTES), { mode: 0o600 });
  const spawner = new HolderSpawner(HOLDER_BINARY, log);
  afterThisTest(() => spawner.close());
  let slot = 0;
  const argvFor = (command: string[]) => {
    const dir = join(root, `cmd${slot}`);
    mkdirSync(dir, { mode: 0o700 });
    return { dir, argv: [HOLDER_BINARY, ...holderArgs({ command }, { dir, usageFile, spoolDir: root, slot: slot++ })] };
  };
  return { root, spawner, argvFor };
}

function stat(pid: number): string[] {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return stat(pid)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** After the test: the command's group killed, and its holder gone before its files are removed. */
function endAfterTest(shellPid: number, holderPid: number): void {
  afterThisTest(async () => {
    try {
      process.kill(-shellPid, 'SIGKILL');
    } catch {
      // gone
    }
    await waitFor(() => !isAlive(holderPid), 5_000, 'the holder to end');
  });
}

/** "ready <shellPid> <shellStart> <holderPid> <holderStart>" → the shell's pid, after checking the line's shape. */
function shellOf(line: string, holderPid: number): number {
  const match = /^ready (\d+) \d+ (\d+) \d+$/.exec(line);
  expect(match, line).not.toBeNull();
  expect(Number(match![2])).toBe(holderPid);
  return Number(match![1]);
}

describe('envd-holder --spawner', () => {
  it('starts a holder in its own session, in the request\'s cwd and environment, labelled --holder', async () => {
    const { root, spawner, argvFor } = setup();
    const { argv } = argvFor(['sleep', '30']);
    const env = { PATH: '/usr/bin:/bin', MARK: 'spawned by the spawner' };
    const holder = await spawner.spawn(argv, root, env, 5_000);
    const shellPid = shellOf(holder.line, holder.holderPid);
    endAfterTest(shellPid, holder.holderPid);

    expect(readlinkSync(`/proc/${holder.holderPid}/cwd`)).toBe(root);
    // `ready` means the shell leads its own session, which is before its exec: until then /proc shows the holder's
    // (empty) environment, so the check waits for the exec.
    await waitFor(() => readFileSync(`/proc/${shellPid}/cmdline`, 'utf8') === 'sleep\u000030\u0000', 5_000, 'the shell to exec sleep');
    // The command runs with the request's environment; the holder shows the spawner's (none: /proc keeps what exec gave).
    expect(readFileSync(`/proc/${shellPid}/environ`, 'utf8').split('\0').filter(Boolean).sort()).toEqual(['MARK=spawned by the spawner', 'PATH=/usr/bin:/bin']);
    expect(readFileSync(`/proc/${holder.holderPid}/environ`, 'utf8')).toBe('');
    // A fork of the spawner (no exec), relabelled so `ps` tells the two apart.
    expect(readFileSync(`/proc/${holder.holderPid}/cmdline`, 'utf8').split('\0')[1]).toBe('--holder');
    expect(readFileSync(`/proc/${spawner.pid}/cmdline`, 'utf8').split('\0')[1]).toBe('--spawner');
    // [state, ppid, pgrp, session]: the holder leads its own session; the shell, a child of the holder, its own.
    const [, holderParent, , holderSession] = stat(holder.holderPid).map(Number);
    expect({ parent: holderParent, session: holderSession }).toEqual({ parent: spawner.pid, session: holder.holderPid });
    const [, shellParent, , shellSession] = stat(shellPid).map(Number);
    expect({ parent: shellParent, session: shellSession }).toEqual({ parent: holder.holderPid, session: shellPid });
    // The spawner's pipes to envd are not the holder's: it holds only its own files and socket.
    const links = (pid: number) => readdirSync(`/proc/${pid}/fd`).map((fd) => readlinkSync(`/proc/${pid}/fd/${fd}`));
    // Node's stdio pipes are socket pairs.
    const spawnerPipes = links(spawner.pid!).filter((link) => /^(pipe|socket):/.test(link));
    expect(spawnerPipes.length).toBeGreaterThanOrEqual(2);
    expect(links(holder.holderPid).filter((link) => spawnerPipes.includes(link))).toEqual([]);
  });

  it('answers many requests at once, each with its own holder', async () => {
    const { spawner, argvFor } = setup();
    const holders = await Promise.all(Array.from({ length: 24 }, () => spawner.spawn(argvFor(['sleep', '30']).argv, '/', { PATH: '/usr/bin:/bin' }, 10_000)));
    holders.forEach((h) => endAfterTest(shellOf(h.line, h.holderPid), h.holderPid));
    expect(new Set(holders.map((h) => h.holderPid)).size).toBe(24);
  });

  it('passes on what a holder that cannot start says, and a cwd it cannot enter', async () => {
    const { spawner, argvFor } = setup();
    // A fresh name each run: a directory some other run left at a fixed name would make this pass wrongly, or fail.
    const missing = `/nonexistent-${randomBytes(6).toString('hex')}`;
    const missingCwd = await spawner.spawn(argvFor(['true']).argv, missing, { PATH: '/bin' }, 5_000);
    expect(missingCwd.line).toBe(`error cannot enter ${missing}: No such file or directory`);
    const badArgs = await spawner.spawn([HOLDER_BINARY, '--dir', `${missing}/x`, '--', 'true'], '/', {}, 5_000);
    expect(badArgs.line).toMatch(/^error /);
    await waitFor(() => !isAlive(missingCwd.holderPid) && !isAlive(badArgs.holderPid), 5_000, 'the failed holders to end');
  });

  it('reaps its holders, and exits at EOF while the holders it started run on', async () => {
    const { spawner, argvFor } = setup();
    const quick = await spawner.spawn(argvFor(['true']).argv, '/', { PATH: '/usr/bin:/bin' }, 5_000);
    endAfterTest(shellOf(quick.line, quick.holderPid), quick.holderPid);
    const lasting = await spawner.spawn(argvFor(['sleep', '30']).argv, '/', { PATH: '/usr/bin:/bin' }, 5_000);
    const shellPid = shellOf(lasting.line, lasting.holderPid);
    endAfterTest(shellPid, lasting.holderPid);
    const spawnerPid = spawner.pid!;
    // The quick holder ends with its command (no client: it exits after writing its status) and leaves no zombie.
    await waitFor(() => !isAlive(quick.holderPid), 5_000, 'the quick holder to end');
    expect(countZombieChildren(spawnerPid)).toBe(0);
    spawner.close();
    await waitFor(() => !isAlive(spawnerPid), 5_000, 'the spawner to exit at EOF');
    expect(isAlive(lasting.holderPid)).toBe(true);
    expect(isAlive(shellPid)).toBe(true);
  });

  it('answers a malformed request with EINVAL instead of starting anything', async () => {
    const child = spawn(HOLDER_BINARY, ['--spawner'], { stdio: ['pipe', 'pipe', 'ignore'] });
    afterThisTest(() => void child.kill('SIGKILL'));
    // id 9, argc 0 (a holder needs at least its own name), envc 0, cwd "/".
    const body = Buffer.concat([Buffer.from([9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), Buffer.from('/\0')]);
    const length = Buffer.alloc(4);
    length.writeUInt32LE(body.length);
    child.stdin.write(Buffer.concat([length, body]));
    const reply = await new Promise<string>((resolve) => child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString())));
    expect(reply).toBe('9 0 spawn-errno 22\n');
  });

  it('fails what a killed spawner had not answered with a 503, and starts a new one for the next request', async () => {
    const { spawner, argvFor } = setup();
    const first = await spawner.spawn(argvFor(['true']).argv, '/', { PATH: '/usr/bin:/bin' }, 5_000);
    expect(first.line).toMatch(/^ready /);
    endAfterTest(shellOf(first.line, first.holderPid), first.holderPid);
    const killed = spawner.pid!;
    // Stopped, it reads no request: this one is pending when the spawner dies.
    process.kill(killed, 'SIGSTOP');
    const pending = spawner.spawn(argvFor(['true']).argv, '/', { PATH: '/usr/bin:/bin' }, 5_000);
    process.kill(killed, 'SIGKILL');
    const error = await pending.then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(HttpError);
    expect((error as HttpError).status).toBe(503);
    const next = await spawner.spawn(argvFor(['true']).argv, '/', { PATH: '/usr/bin:/bin' }, 5_000);
    expect(next.line).toMatch(/^ready /);
    endAfterTest(shellOf(next.line, next.holderPid), next.holderPid);
    expect(spawner.pid).not.toBe(killed);
  });
});
