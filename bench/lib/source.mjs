// How the benches read a source file they send to envd (and the tar baseline's sender): in 1 MiB chunks.
// With createReadStream's 64 KiB default the bench's own sender was the bottleneck: 500 MiB
// through node:http into a server that discards took ~850 ms (~390 ms in 1 MiB chunks, curl
// ~280 ms), so upload figures measured the client, not envd.
import { createReadStream } from 'node:fs';

export const SOURCE_CHUNK_BYTES = 1024 * 1024;

export function readSource(path) {
  return createReadStream(path, { highWaterMark: SOURCE_CHUNK_BYTES });
}
