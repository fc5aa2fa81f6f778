import { describe, expect, it } from 'vitest';
import { encodeLiveOn, encodeResize, encodeStdin, encodeStdinEof } from '../../src/holder/protocol.js';
import { isAlive, parseLog, readLog, readStatus, startHolder, useHolders, type HolderClient, type RunningHolder } from '../helpers/holder.js';
import { findProcesses, waitFor } from '../helpers/proc.js';

useHolders();

const finished = async (holder: RunningHolder) => {
  expect(await holder.exited).toBe(0);
  return { status: readStatus(holder.dir)!, log: parseLog(readLog(holder.dir)) };
};

/** A live client that gathers the terminal's output, so a test can wait for text in it. */
async function liveTerminal(holder: RunningHolder): Promise<{ client: HolderClient; output: () => string; waitForText: (text: string) => Promise<void> }> {
  const client = await holder.connect();
  expect((await client.next()).type).toBe('hello');
  client.send(encodeLiveOn());
  const sync = await client.next();
  if (sync.type !== 'sync') throw new Error(`expected SYNC, got ${sync.type}`);
  // What was kept before SYNC comes from the log, the rest as DATA: the way envd replays then follows.
  let text = parseLog(readLog(holder.dir).subarray(0, sync.logEnd)).stdout.toString();
  const pump = async () => {
    for (;;) {
      const message = await client.next(60_000).catch(() => undefined);
      if (!message) return;
      if (message.type === 'data') {
        expect(message.stream).toBe('stdout'); // a terminal has one output
        text += message.bytes.toString();
      }
      if (message.type === 'exit') return;
    }
  };
  void pump();
  return {
    client,
    output: () => text,
    waitForText: (wanted) => waitFor(() => text.includes(wanted), 10_000, `${JSON.stringify(wanted)} in ${JSON.stringify(text)}`),
  };
}

describe('envd-holder pty', () => {
  it('runs the command on a terminal of the given size that is its stdin, stdout and stderr', async () => {
    const holder = await startHolder({
      command: ['sh', '-c', 'tty; stty size; [ -t 0 ] && echo stdin-tty; [ -t 2 ] && echo oops >&2'],
      pty: { cols: 100, rows: 30 },
    });
    const { status, log } = await finished(holder);
    expect(status).toMatchObject({ exitCode: 0, signal: 0 });
    // The terminal turns \n into \r\n, and stderr arrives on the one output.
    expect(log.stdout.toString()).toMatch(/^\/dev\/pts\/\d+\r\n30 100\r\nstdin-tty\r\noops\r\n$/);
    expect(log.stderr.length).toBe(0);
  });

  it('resizes on RESIZE: the foreground job gets SIGWINCH and sees the new size', async () => {
    const holder = await startHolder({
      command: ['sh', '-c', 'trap "echo WINCH; stty size" WINCH; echo ready; while :; do sleep 0.05; done'],
      pty: { cols: 80, rows: 24 },
    });
    const terminal = await liveTerminal(holder);
    await terminal.waitForText('ready');
    terminal.client.send(encodeResize(1, 132, 43));
    await terminal.waitForText('WINCH\r\n43 132\r\n');
    process.kill(-holder.shellPid, 'SIGKILL');
    await finished(holder);
  });

  it('delivers Ctrl-C to the foreground job of an interactive bash, which lives on', async () => {
    const holder = await startHolder({
      command: ['bash', '--norc', '--noprofile', '-i'],
      pty: { cols: 80, rows: 24 },
      env: { PATH: '/usr/bin:/bin', PS1: '$ ', TERM: 'dumb' },
    });
    const terminal = await liveTerminal(holder);
    terminal.client.send(encodeStdin(1, Buffer.from('sleep 100.5\n')));
    await waitFor(() => findProcesses('sleep 100.5').length === 1, 10_000, 'sleep to start');
    const [sleeper] = findProcesses('sleep 100.5');
    terminal.client.send(encodeStdin(2, Buffer.from('\u0003')));
    await waitFor(() => !isAlive(sleeper!), 10_000, 'sleep to be interrupted');
    expect(isAlive(holder.shellPid)).toBe(true);
    terminal.client.send(encodeStdin(3, Buffer.from('echo alive-$((6*7))\n')));
    await terminal.waitForText('alive-42');
    terminal.client.send(encodeStdin(4, Buffer.from('exit 5\n')));
    const { status } = await finished(holder);
    expect(status).toMatchObject({ exitCode: 5, signal: 0 });
  });

  it('ends cat with STDIN_EOF (^D) and accepts stdin without --stdin', async () => {
    const holder = await startHolder({ command: ['cat'], pty: { cols: 80, rows: 24 } });
    const terminal = await liveTerminal(holder);
    terminal.client.send(encodeStdin(1, Buffer.from('hello\n')));
    // Echoed by the terminal, then printed by cat.
    await terminal.waitForText('hello\r\nhello\r\n');
    terminal.client.send(encodeStdinEof(2));
    const { status, log } = await finished(holder);
    expect(status).toMatchObject({ exitCode: 0, signal: 0 });
    expect(log.stdout.toString()).toBe('hello\r\nhello\r\n');
  });
});
