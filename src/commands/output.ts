import { Readable } from 'node:stream';
import type { StreamName } from '../holder/protocol.js';
import { conflict, HttpError } from '../errors.js';
import { parseRange } from '../files/download.js';
import type { TrackedProcess } from './tracked-process.js';

export interface OutputQuery {
  stream?: StreamName | undefined;
  from?: number | undefined;
  limit?: number | undefined;
}

export interface OutputAnswer {
  status: 200 | 206;
  headers: Record<string, string>;
  body: Readable;
}

/**
 * A command's kept output of one stream as plain bytes, running or finished:
 * `from`/`limit` in the query, or a `Range: bytes=` header (206, or 416 past
 * the end), as for a download. The resource is what was kept: the first
 * `kept` bytes of the stream, all of them unless the cap or the budgets cut it
 * (headers `x-envd-kept-bytes`, `x-envd-written-bytes`). Read from the log a
 * frame at a time: nothing of it is held whole.
 */
export async function keptOutput(proc: TrackedProcess, query: OutputQuery, rangeHeader: string | undefined): Promise<OutputAnswer> {
  const stream = query.stream ?? 'stdout';
  const offsets = await proc.log.offsets();
  if (!offsets) throw conflict(`pid ${proc.pid} was started by an older envd: read its output with wait or a stream`);
  const kept = offsets.kept[stream];
  const headers: Record<string, string> = {
    'content-type': 'application/octet-stream',
    'accept-ranges': 'bytes',
    'x-envd-kept-bytes': String(kept),
    'x-envd-written-bytes': String(offsets.written[stream]),
  };
  const range = query.from === undefined && query.limit === undefined ? parseRange(rangeHeader, kept) : undefined;
  if (range === 'unsatisfiable') throw new HttpError(416, `the range is past the ${kept} bytes of ${stream} kept`, { headers: { 'content-range': `bytes */${kept}` } });
  let start = 0;
  let end = kept;
  if (range) {
    start = range.start;
    end = range.end + 1;
    headers['content-range'] = `bytes ${start}-${range.end}/${kept}`;
  } else if (query.from !== undefined || query.limit !== undefined) {
    start = query.from ?? 0;
    if (start > kept) throw new HttpError(416, `querystring/from: ${start} is past the ${kept} bytes of ${stream} kept`, { headers: { 'content-range': `bytes */${kept}` } });
    end = query.limit === undefined ? kept : Math.min(kept, start + query.limit);
  }
  headers['content-length'] = String(end - start);
  return { status: range ? 206 : 200, headers, body: Readable.from(proc.log.streamBytes(stream, start, end), { objectMode: false }) };
}
