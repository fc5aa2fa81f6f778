import type { Readable } from 'node:stream';

/**
 * The chunks of a stream, read up to `aheadBytes` ahead of the consumer.
 * A request body read only as fast as it is consumed (an async iterator)
 * stops the socket whenever its 16 KiB buffer is full: while envd writes a
 * run of small files the sender is stopped too, and waits for it to ask
 * again. Reading ahead keeps the bytes coming meanwhile; memory is bounded
 * by `aheadBytes` and the chunk in hand.
 */
export async function* readAhead(stream: Readable, aheadBytes: number): AsyncGenerator<Buffer> {
  const queue: Buffer[] = [];
  let queued = 0;
  let ended = false;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  const onData = (chunk: Buffer) => {
    queue.push(chunk);
    queued += chunk.length;
    if (queued >= aheadBytes) stream.pause();
    wake?.();
  };
  const onEnd = () => {
    ended = true;
    wake?.();
  };
  const onError = (error: Error) => {
    failure = error;
    wake?.();
  };
  // A body cut off (the client gone) closes without an end: an error, not a short archive.
  const onClose = () => onError(failure ?? new Error('the request body ended before it was complete'));
  stream.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  try {
    for (;;) {
      const chunk = queue.shift();
      if (chunk) {
        queued -= chunk.length;
        if (stream.isPaused() && queued < aheadBytes / 2) stream.resume();
        yield chunk;
        continue;
      }
      if (ended) return;
      if (failure) throw failure;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    stream.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    if (!ended) stream.resume(); // the rest is read and dropped, so the connection can answer
  }
}
