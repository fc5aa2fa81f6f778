import { conflict, HttpError } from '../errors.js';
import type { AckStatus } from '../holder/protocol.js';
import type { Logger } from '../logger.js';
import type { HolderLink } from './holder-link.js';
import { writeMeta, type CommandMeta } from './meta.js';

/** What a command's stdin and terminal need of it: its link, while there is one. */
export interface CommandInput {
  pid: number;
  dir: string;
  meta: CommandMeta;
  running: boolean;
  link: HolderLink | undefined;
}

/** Resolves once the command took the data: a command that does not read holds the caller. */
export async function writeStdin(command: CommandInput, data: Buffer): Promise<void> {
  requireStdin(command);
  requireReachable(command);
  checkAck(command, await (command.link?.stdin(data) ?? 'closed'));
}

export async function closeStdin(command: CommandInput): Promise<void> {
  requireStdin(command);
  requireReachable(command);
  const status = command.link ? await command.link.stdinEof() : 0;
  // An ended command's stdin is closed already: closing it again is fine.
  if (status !== 'closed') checkAck(command, status);
}

export async function resizeTerminal(command: CommandInput, cols: number, rows: number, logger: Logger): Promise<void> {
  const { pid, meta } = command;
  if (!meta.pty) throw conflict(`pid ${pid} has no terminal (it was not started with pty)`);
  requireReachable(command);
  const status = command.link ? await command.link.resize(cols, rows) : 'closed';
  if (status === 'closed') throw conflict(`the terminal of pid ${pid} is closed: the command has ended`);
  checkAck(command, status);
  meta.pty = { cols, rows };
  // So a restarted envd lists the size the terminal really has.
  await writeMeta(command.dir, meta).catch((error: unknown) => logger.warn({ err: error, pid }, 'could not record the new terminal size'));
}

/** A running command whose holder envd cannot reach right now: its stdin and terminal wait for the reconnect. */
function requireReachable({ running, link, pid }: CommandInput): void {
  if (running && !link) throw new HttpError(503, `the holder of pid ${pid} does not answer right now; retry shortly`);
}

function requireStdin({ meta, pid }: CommandInput): void {
  if (!meta.stdin && !meta.pty) throw conflict(`pid ${pid} was not started with stdin: true`);
}

function checkAck({ pid }: CommandInput, status: AckStatus | 'closed'): void {
  if (status === 0) return;
  if (status === 1) throw conflict(`pid ${pid} was not started with stdin: true`);
  throw conflict(`stdin of pid ${pid} is closed`);
}
