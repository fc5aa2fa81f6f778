import type { StreamOffsets } from '../holder/protocol.js';
import type { TrackedProcess } from '../commands/tracked-process.js';
import { Utf8Cursor } from '../commands/utf8-cursor.js';

/** The most output (bytes of both streams) one GET /services/{name}/logs answers; `more` says there is more. */
export const MAX_LOGS_ANSWER_BYTES = 1024 * 1024;

export interface LogsPage {
  pid: number;
  stdout: string;
  stderr: string;
  cursor: string;
  more: boolean;
}

/**
 * A run's kept output after `from`, as text, up to MAX_LOGS_ANSWER_BYTES: the
 * cursor it ends at is a position of the same kind as a stream's event ids, at
 * a character's start (a character cut by the limit waits for the next page).
 */
export async function readLogsPage(proc: TrackedProcess, from: StreamOffsets = { stdout: 0, stderr: 0 }): Promise<LogsPage> {
  const cursors = { stdout: new Utf8Cursor(from.stdout), stderr: new Utf8Cursor(from.stderr) };
  const text = { stdout: [] as string[], stderr: [] as string[] };
  const end = await proc.log.size();
  let taken = 0;
  let more = false;
  for await (const frame of proc.log.framesFrom(() => end, from)) {
    const room = MAX_LOGS_ANSWER_BYTES - taken;
    if (room <= 0) {
      more = true;
      break;
    }
    const bytes = frame.bytes.length > room ? frame.bytes.subarray(0, room) : frame.bytes;
    if (bytes.length < frame.bytes.length) more = true;
    taken += bytes.length;
    text[frame.stream].push(cursors[frame.stream].write(bytes));
    if (more) break;
  }
  // A finished run's last incomplete character is all there will be: one U+FFFD, counted.
  if (!more && !proc.running) for (const stream of ['stdout', 'stderr'] as const) text[stream].push(cursors[stream].end());
  return { pid: proc.pid, stdout: text.stdout.join(''), stderr: text.stderr.join(''), cursor: `${cursors.stdout.offset}-${cursors.stderr.offset}`, more };
}
