import type { StreamOffsets } from '../holder/protocol.js';
import { badRequest, conflict, HttpError } from '../errors.js';
import type { TrackedProcess } from './tracked-process.js';

/** An SSE id of envd's: `<stdout bytes>-<stderr bytes>` (docs/api.md, "Resuming a stream"). */
const CURSOR = /^(\d{1,15})-(\d{1,15})$/;

/**
 * Where a client resumes a command's output: the `from` query (wins unless
 * empty) or the `Last-Event-ID` header an EventSource sends on its own; undefined when it
 * gives neither (from the start). A cursor that is not one of envd's ids is
 * 400; one past what the command has written is 416; a command whose holder
 * keeps no offsets (started by an envd older than resumable output) cannot be
 * resumed: 409.
 */
export async function resumeCursor(proc: TrackedProcess, query: string | undefined, header: string | string[] | undefined): Promise<StreamOffsets | undefined> {
  // An empty `from` (a client that fills the query in only when it has a position) is no position: the header's counts.
  const [given, field] = query !== undefined && query !== '' ? [query, 'querystring/from'] : [Array.isArray(header) ? header[0] : header, 'Last-Event-ID'];
  if (given === undefined || given === '') return undefined;
  const match = CURSOR.exec(given.trim());
  if (!match) throw badRequest(`${field}: ${JSON.stringify(given)} is not a position of this stream (an event id: <stdout bytes>-<stderr bytes>)`);
  const from = { stdout: Number(match[1]), stderr: Number(match[2]) };
  if (!proc.resumable) throw conflict(`pid ${proc.pid} was started by an older envd: its output cannot be resumed, only replayed from the start`);
  const offsets = await proc.log.offsets();
  const written = offsets?.written ?? { stdout: 0, stderr: 0 };
  if (from.stdout > written.stdout || from.stderr > written.stderr) {
    throw new HttpError(416, `${field}: ${given} is past the output of pid ${proc.pid} (${written.stdout} bytes of stdout, ${written.stderr} of stderr so far)`);
  }
  return from;
}
