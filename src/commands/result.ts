import { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import type { StreamName } from '../holder/protocol.js';
import type { CommandResult } from './schemas.js';
import type { TrackedProcess } from './tracked-process.js';

/** Results whose kept output is at most this big are built in memory; larger ones are streamed from the log. */
export const INLINE_RESULT_BYTES = 1024 * 1024;

/**
 * A finished command's `CommandResult`: its kept output, how it ended, and
 * the truncation flags. Small results are an object; large ones a JSON text
 * stream read from the log twice (stdout, then stderr), so a 64 MiB result is
 * never held in memory, let alone in several copies.
 */
export async function commandResult(proc: TrackedProcess): Promise<CommandResult | Readable> {
  const end = proc.completeLogEnd;
  if (end === undefined || proc.exit === undefined) throw new Error('commandResult before the command finished');
  if (end > INLINE_RESULT_BYTES) return Readable.from(resultText(proc, end), { objectMode: false });
  const text = { stdout: '', stderr: '' };
  const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  for await (const frame of proc.log.frames(() => end)) text[frame.stream] += decoders[frame.stream].write(frame.bytes);
  return { stdout: text.stdout + decoders.stdout.end(), stderr: text.stderr + decoders.stderr.end(), ...resultTail(proc) };
}

function resultTail(proc: TrackedProcess): Omit<CommandResult, 'stdout' | 'stderr'> {
  return {
    ...proc.exit!,
    ...(proc.truncated.stdout ? { stdout_truncated: true as const } : {}),
    ...(proc.truncated.stderr ? { stderr_truncated: true as const } : {}),
  };
}

async function* resultText(proc: TrackedProcess, end: number): AsyncGenerator<string> {
  yield '{"stdout":"';
  yield* escapedStream(proc, 'stdout', end);
  yield '","stderr":"';
  yield* escapedStream(proc, 'stderr', end);
  yield `",${JSON.stringify(resultTail(proc)).slice(1)}`;
}

/** One stream's text as the inside of a JSON string, one log read at a time. */
async function* escapedStream(proc: TrackedProcess, stream: StreamName, end: number): AsyncGenerator<string> {
  const decoder = new StringDecoder('utf8');
  for await (const frame of proc.log.frames(() => end)) {
    if (frame.stream !== stream) continue;
    const text = decoder.write(frame.bytes);
    if (text !== '') yield JSON.stringify(text).slice(1, -1);
  }
  const rest = decoder.end();
  if (rest !== '') yield JSON.stringify(rest).slice(1, -1);
}
