import type { ShellOptions } from './options.js';

/** Keystrokes typed while a write is on its way are sent together, up to this many characters per request. */
const MAX_INPUT_BATCH = 64 * 1024;

interface Terminal {
  stdin: NodeJS.ReadStream;
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
}

/**
 * An interactive terminal on envd: starts the command on a pty
 * (`POST /commands {pty, background}`), follows its output (`GET
 * /commands/{pid}/stream`), forwards keystrokes (`POST .../stdin`) and window
 * sizes (`POST .../resize`), and resolves with the remote exit code. The
 * local terminal is raw meanwhile and restored on every way out.
 */
export async function runShell(options: ShellOptions, terminal: Terminal = process): Promise<number> {
  const { stdin, stdout, stderr } = terminal;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const call = async (method: string, path: string, body?: unknown): Promise<Response> => {
    const response = await fetch(options.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (!response.ok) {
      const text = await response.text();
      let message = text;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? text;
      } catch {
        // Not JSON (a proxy's page): show it as it is.
      }
      throw new Error(`${method} ${path}: ${response.status} ${message}`.trim());
    }
    return response;
  };
  const size = () => ({ cols: stdout.columns || 80, rows: stdout.rows || 24 });

  const started = await call('POST', '/commands', {
    ...(options.cmd === '' ? {} : { cmd: options.cmd }),
    pty: size(),
    background: true,
    ...(options.user ? { user: options.user } : {}),
    ...(options.cwd ? { cwd: options.cwd } : {}),
  });
  const { pid } = (await started.json()) as { pid: number };
  const output = await call('GET', `/commands/${pid}/stream`);

  const raw = stdin.isTTY === true;
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    if (raw) stdin.setRawMode(false);
    stdin.pause();
    stdout.off('resize', onResize);
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal).off('SIGHUP', onSignal);
  };

  // Keystrokes in order: one request at a time, what piles up meanwhile goes in the next one.
  let pending = '';
  let sending = false;
  const sendInput = async () => {
    if (sending) return;
    sending = true;
    try {
      while (pending !== '') {
        const batch = pending.slice(0, MAX_INPUT_BATCH);
        pending = pending.slice(batch.length);
        await call('POST', `/commands/${pid}/stdin`, { data: batch });
      }
    } catch {
      // The command ended while keys were on their way: the exit event says the rest.
      pending = '';
    } finally {
      sending = false;
    }
  };
  const onInput = (chunk: Buffer) => {
    pending += chunk.toString('utf8');
    void sendInput();
  };
  const onResize = () => void call('POST', `/commands/${pid}/resize`, size()).catch(() => {});
  let interrupted: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    // The local envd shell was told to stop: end the remote side too, then leave.
    interrupted = signal;
    void call('DELETE', `/commands/${pid}`).catch(() => {});
    output.body?.cancel().catch(() => {});
  };

  if (raw) stdin.setRawMode(true);
  stdin.on('data', onInput);
  stdin.resume();
  stdout.on('resize', onResize);
  process.on('SIGINT', onSignal).on('SIGTERM', onSignal).on('SIGHUP', onSignal);

  try {
    const exitCode = await pipeOutput(output, stdout);
    if (interrupted) return 128 + (interrupted === 'SIGINT' ? 2 : interrupted === 'SIGTERM' ? 15 : 1);
    if (exitCode === undefined) {
      restore();
      stderr.write('\r\nenvd shell: the connection to envd ended before the command did\n');
      return 1;
    }
    return exitCode;
  } catch (error) {
    restore();
    if (interrupted) return 128 + (interrupted === 'SIGINT' ? 2 : 15);
    stderr.write(`\r\nenvd shell: lost the connection to envd: ${(error as Error).message}\n`);
    return 1;
  } finally {
    restore();
    stdin.off('data', onInput);
  }
}

/** Writes the stream's stdout events to the terminal; resolves with the exit event's code, or undefined if the stream ended without one. */
async function pipeOutput(response: Response, stdout: NodeJS.WriteStream): Promise<number | undefined> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body!) {
    buffer += decoder.decode(chunk as Uint8Array, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event === undefined || data === undefined) continue;
      const parsed = JSON.parse(data) as { data?: string; exit_code?: number };
      if (event === 'stdout' || event === 'stderr') stdout.write(parsed.data ?? '');
      else if (event === 'exit') return parsed.exit_code ?? 1;
    }
  }
  return undefined;
}
