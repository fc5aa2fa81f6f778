import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { countZombieChildren, findProcesses, startEnvdProcess, waitFor } from '../helpers/proc.js';
import { useCommandServer } from '../helpers/command-user.js';
import { startServer } from '../helpers/server.js';

const fixture = useCommandServer();

/**
 * A command that leaves three sleepers named by a fresh marker: a child, a
 * grandchild, and a grandchild that escaped into its own session with setsid.
 */
function treeCommand(): { marker: string; cmd: string } {
  const suffix = randomBytes(4).toString('hex');
  const marker = `envd-kill-${suffix}`;
  fixture.markers.push(marker);
  // The marker is only assembled inside the sleepers, so no shell's own command line matches it.
  const cmd = [
    `export P=envd-kill- S=${suffix}`,
    `bash -c 'exec -a "$P$S-child" sleep 1000' &`,
    `(bash -c 'exec -a "$P$S-grandchild" sleep 1000' & wait) &`,
    `setsid bash -c 'exec -a "$P$S-setsid" sleep 1000' &`,
    'echo started',
    'wait',
  ].join('\n');
  return { marker, cmd };
}

const allThreeRunning = (marker: string) => () => findProcesses(marker).length === 3;
const noneLeft = (marker: string) => () => findProcesses(marker).length === 0;

describe('killing commands', () => {
  it('a timeout kills the whole tree, grandchildren and setsid escapees included, and reports 124', async () => {
    const { marker, cmd } = treeCommand();
    const started = await fixture.server.json('POST', '/commands', { cmd, timeout: 1.5, background: true });
    await waitFor(allThreeRunning(marker), 10_000, 'the tree to start');
    const { body } = await fixture.server.json('GET', `/commands/${started.body.pid}/wait`);
    expect(body).toMatchObject({ stdout: 'started\n', exit_code: 124, reason: 'timed_out', timed_out: true });
    await waitFor(noneLeft(marker), 5_000, 'every process of the tree to be gone');
  });

  it('a foreground timeout answers with 124 and timed_out', async () => {
    const { marker, cmd } = treeCommand();
    const { body } = await fixture.server.json('POST', '/commands', { cmd, timeout: 1 });
    expect(body).toMatchObject({ stdout: 'started\n', exit_code: 124, reason: 'timed_out', timed_out: true });
    await waitFor(noneLeft(marker), 5_000, 'every process of the tree to be gone');
  });

  it('DELETE /commands/{pid} kills the whole tree and forgets the pid', async () => {
    const { marker, cmd } = treeCommand();
    const { body: started } = await fixture.server.json('POST', '/commands', { cmd, background: true });
    await waitFor(allThreeRunning(marker), 10_000, 'the tree to start');
    expect(await fixture.server.json('DELETE', `/commands/${started.pid}`)).toEqual({ status: 200, body: { killed: true } });
    await waitFor(noneLeft(marker), 5_000, 'every process of the tree to be gone');
    expect((await fixture.server.json('GET', `/commands/${started.pid}/wait`)).body).toEqual({ stdout: '', stderr: 'process not found', exit_code: 1, reason: 'exited' });
    expect(await fixture.server.json('DELETE', `/commands/${started.pid}`)).toEqual({ status: 200, body: { killed: false } });
  });

  it('DELETE after the shell exited still kills what it left in its process group', async () => {
    const marker = `envd-left-${randomBytes(4).toString('hex')}`;
    fixture.markers.push(marker);
    // The shell exits at once; its background sleeper stays in the group, holding the pipes.
    const { body: started } = await fixture.server.json('POST', '/commands', { cmd: `bash -c "exec -a ${marker} sleep 1000" & echo bye`, background: true });
    await waitFor(() => findProcesses(marker).length === 1, 10_000, 'the leftover to start');
    await waitFor(async () => (await fixture.server.json('GET', '/commands')).body.processes.some((p: any) => p.pid === started.pid && !p.running), 5_000, 'the shell to finish');
    expect((await fixture.server.json('DELETE', `/commands/${started.pid}`)).body).toEqual({ killed: true });
    await waitFor(noneLeft(marker), 5_000, 'the leftover to be killed');
  });

  it('a signal reaches the process group and is reported as 128 + n', async () => {
    for (const [signal, code] of [['SIGTERM', 143], ['SIGKILL', 137], ['SIGUSR1', 138]] as const) {
      const { body: started } = await fixture.server.json('POST', '/commands', { cmd: 'sleep 1000', background: true });
      expect(await fixture.server.json('POST', `/commands/${started.pid}/signal`, { signal })).toEqual({ status: 200, body: {} });
      const { body } = await fixture.server.json('GET', `/commands/${started.pid}/wait`);
      expect(body).toMatchObject({ exit_code: code, signal });
    }
  });

  it('SIGSTOP and SIGCONT pause and resume the group', async () => {
    const { body: started } = await fixture.server.json('POST', '/commands', { cmd: 'sleep 0.5; echo woke', background: true });
    await fixture.server.json('POST', `/commands/${started.pid}/signal`, { signal: 'SIGSTOP' });
    await waitFor(() => /\) T /.test(readStat(started.pid)), 5_000, 'the shell to stop');
    await fixture.server.json('POST', `/commands/${started.pid}/signal`, { signal: 'SIGCONT' });
    expect((await fixture.server.json('GET', `/commands/${started.pid}/wait`)).body).toMatchObject({ stdout: 'woke\n', exit_code: 0, reason: 'exited' });
  });

  it('refuses an unknown signal with 400 and an untracked pid with 404', async () => {
    const bad = await fixture.server.json('POST', '/commands/1/signal', { signal: 'SIGSEGV' });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/signal/);
    const untracked = await fixture.server.json('POST', '/commands/4194303/signal', { signal: 'SIGTERM' });
    expect(untracked.status).toBe(404);
    expect(untracked.body.message).toMatch(/4194303/);
  });

  it('kills a foreground command\'s tree when the client goes away', async () => {
    const { marker, cmd } = treeCommand();
    const abort = new AbortController();
    const request = fixture.server.call('POST', '/commands', { cmd }, { signal: abort.signal }).catch((error: unknown) => error);
    await waitFor(allThreeRunning(marker), 10_000, 'the tree to start');
    abort.abort();
    expect(await request).toBeInstanceOf(Error);
    await waitFor(noneLeft(marker), 5_000, 'every process of the tree to be gone');
    // Its request is over: collected (kept for --keep-finished, listed only when finished ones are asked for).
    await waitFor(() => fixture.server.app.envd.processes.list().every((proc) => !proc.running && proc.collected), 5_000, 'the command to be collected');
  });

  it('finishes a foreground command that leaves a daemon holding its output pipes, without killing the daemon', async () => {
    const marker = `envd-daemon-${randomBytes(4).toString('hex')}`;
    fixture.markers.push(marker);
    const { body } = await fixture.server.json('POST', '/commands', { cmd: `(exec -a ${marker} sleep 1000 &); echo started` });
    expect(body).toEqual({ stdout: 'started\n', stderr: '', exit_code: 0, reason: 'exited' });
    expect(findProcesses(marker)).toHaveLength(1);
  });

  it('leaves no zombie children behind', async () => {
    await Promise.all(Array.from({ length: 10 }, () => fixture.server.json('POST', '/commands', { cmd: 'true' })));
    await waitFor(() => countZombieChildren() === 0, 5_000, 'no zombie children');
  });
});

describe('shutdown', () => {
  it('app close kills every tracked tree, setsid escapees of each included, and nothing else', async () => {
    const own = await startServer({ defaultUser: fixture.user.name });
    // Shutdown kills all trees in one pass (killProcessTrees): each must still be found whole.
    const trees = [treeCommand(), treeCommand(), treeCommand()];
    for (const { cmd } of trees) await own.json('POST', '/commands', { cmd, background: true });
    for (const { marker } of trees) await waitFor(allThreeRunning(marker), 10_000, 'the trees to start');
    const bystander = spawn('sleep', ['1000'], { stdio: 'ignore' });
    try {
      await own.close();
      for (const { marker } of trees) await waitFor(noneLeft(marker), 5_000, 'every process of every tree to be gone');
      expect(bystander.exitCode).toBeNull();
      expect(readStat(bystander.pid!)).not.toMatch(/\) [TtZ] /);
    } finally {
      bystander.kill('SIGKILL');
    }
  });

  it('SIGTERM to envd kills its running commands and exits 0', async () => {
    const envd = await startEnvdProcess(['--default-user', fixture.user.name], { ENVD_ACCESS_TOKEN: 'tok' });
    try {
      const { marker, cmd } = treeCommand();
      const headers = { authorization: 'Bearer tok', 'content-type': 'application/json' };
      const started = await fetch(`${envd.url}/commands`, { method: 'POST', headers, body: JSON.stringify({ cmd, background: true }) });
      expect(started.status).toBe(200);
      // And one foreground command still in flight.
      const foreground = fetch(`${envd.url}/commands`, { method: 'POST', headers, body: JSON.stringify({ cmd: `exec -a ${marker}-fg sleep 1000` }) }).catch(() => undefined);
      await waitFor(() => findProcesses(marker).length === 4, 10_000, 'the commands to start');
      expect(await envd.stop('SIGTERM')).toBe(0);
      await foreground;
      await waitFor(noneLeft(marker), 5_000, 'every process envd started to be gone');
    } finally {
      await envd.stop('SIGKILL');
    }
  });
});

function readStat(pid: number): string {
  return readFileSync(`/proc/${pid}/stat`, 'utf8');
}
