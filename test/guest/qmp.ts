import { connect, type Socket } from 'node:net';
import { createInterface } from 'node:readline';

/** A minimal QMP client: one command at a time, asynchronous events ignored. */
export interface Qmp {
  execute<T = any>(command: string, args?: Record<string, unknown>): Promise<T>;
  close(): void;
}

export async function connectQmp(socketPath: string, timeoutMs = 10_000): Promise<Qmp> {
  const deadline = Date.now() + timeoutMs;
  let socket: Socket;
  for (;;) {
    try {
      socket = await new Promise<Socket>((resolve, reject) => {
        const s = connect(socketPath, () => resolve(s));
        s.once('error', reject);
      });
      break;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const replies: Array<(message: any) => void> = [];
  let greeted: () => void;
  const greeting = new Promise<void>((resolve) => (greeted = resolve));
  createInterface({ input: socket }).on('line', (line) => {
    const message = JSON.parse(line);
    if ('QMP' in message) greeted();
    else if ('return' in message || 'error' in message) replies.shift()?.(message);
  });
  await greeting;
  const qmp: Qmp = {
    execute(command, args) {
      return new Promise((resolve, reject) => {
        replies.push((message) => (message.error ? reject(new Error(`QMP ${command}: ${message.error.desc}`)) : resolve(message.return)));
        socket.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}) })}\n`);
      });
    },
    close() {
      socket.destroy();
    },
  };
  await qmp.execute('qmp_capabilities');
  return qmp;
}
