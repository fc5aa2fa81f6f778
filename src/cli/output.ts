import type { CommandEvent } from '../client/index.js';
import type { Common } from './args.js';

/** The status of a process that wrote to a pipe nobody reads: killed by SIGPIPE, as a shell reports it (128 + 13). */
export const CLOSED_PIPE_STATUS = 141;

/** Whether an error is a write to a closed pipe (`envd ... | head -1`): the reader has all it wanted. */
export const isClosedPipe = (error: unknown): boolean => (error as NodeJS.ErrnoException | null)?.code === 'EPIPE';

/**
 * Ends quietly with the closed-pipe status when stdout or stderr is a pipe
 * whose reader has gone, whatever the verb was doing: the error comes as an
 * 'error' event on the stream, which Node would otherwise report with a stack.
 */
export function exitQuietlyOnClosedPipe(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error) => {
      if (isClosedPipe(error)) process.exit(CLOSED_PIPE_STATUS);
      throw error;
    });
  }
}

/** Writes and waits while the stream is full: a fast command and a slow reader never pile output up here. */
export async function write(stream: NodeJS.WriteStream, chunk: string | Uint8Array): Promise<void> {
  if (!stream.write(chunk)) await new Promise<void>((resolve) => stream.once('drain', resolve));
}

/** How a followed stream went: the command's exit status, and the id of the last event seen (to resume from). */
export interface Followed {
  status: number | undefined;
  last: string | undefined;
}

/**
 * Follows a command's events to stdout/stderr. Output events are text, or
 * (`bytes`: the stream was asked for encoding base64) raw bytes written as they
 * came. `seen` is kept current, so an interrupted follow can say where it stood.
 */
export async function follow(events: AsyncIterable<CommandEvent>, common: Common, bytes: boolean, seen: Followed = { status: undefined, last: undefined }): Promise<Followed> {
  for await (const event of events) {
    if ('id' in event && event.id) seen.last = event.id;
    if (common.json) await write(process.stdout, `${JSON.stringify(event)}\n`);
    else if (event.event === 'stdout' || event.event === 'stderr') {
      const to = event.event === 'stdout' ? process.stdout : process.stderr;
      await write(to, bytes ? Buffer.from(event.data.data, 'base64') : event.data.data);
    } else if (event.event === 'truncated') process.stderr.write(`envd: ${event.data.bytes} bytes of ${event.data.stream} were not kept\n`);
    if (event.event === 'exit') {
      seen.status = event.data.exit_code;
      return seen;
    }
  }
  return seen;
}

/** Output as raw bytes unless a terminal shows it (text there: a split character is still whole, invalid bytes visible as U+FFFD). */
export const bytesWanted = (): boolean => !process.stdout.isTTY;
