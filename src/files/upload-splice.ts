import type { FileHandle } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { outcomeError, startBodyReader, takeOverBody } from './body-takeover.js';

/**
 * Fills `handle` with the request's body of `length` bytes (a length
 * `spliceableLength` accepted) and closes it: the bytes Node's HTTP parser
 * has already read come from the request, the rest from the socket through
 * the holder's --receive mode (src/holder/receive.c), which moves them with
 * splice(2), socket -> pipe -> file in the kernel, no copy through envd's
 * heap and no JavaScript per chunk, and flushes the file to disk.
 *
 * Afterwards the parser still counts the spliced bytes as unread: on success
 * the request is marked complete and the caller must close the connection
 * (`Connection: close`); on failure the request reads again, so that the
 * answer's lingering close drains what the client still sends.
 */
export async function spliceBody(request: IncomingMessage, handle: FileHandle, length: number, receiver: string): Promise<void> {
  let completed = false;
  let taken;
  try {
    // From here the request must never ask the socket for more: the receiver owns its bytes.
    taken = takeOverBody(request, length);
    // The whole body was read already: nothing for the kernel to move.
    if (taken.earlyBytes === length) {
      await handle.writev(taken.early, 0);
      await handle.sync();
      completed = true;
      return;
    }
    const { outcome } = startBodyReader(receiver, '--receive', length - taken.earlyBytes, taken, request.socket as Socket, handle.fd);
    const ended = await outcome;
    const failure = outcomeError(ended);
    if (failure) throw failure;
    completed = true;
  } finally {
    await handle.close();
    taken?.handBack(completed);
  }
}
