import { tmpdir } from 'node:os';
import { useFileBatches } from '../../src/files/tar/file-batch.js';
import type { Logger } from '../../src/logger.js';
import { fileBatchCalls } from '../../src/native/malloc-trim.js';

// Loaded before every test file (setupFiles): the tar writer uses the addon's
// batched file calls as envd does once main.ts has loaded it (dist/, built by
// npm test first), so the suite tests what runs. test/files/tar-file-batch.test.ts
// covers the node:fs fallback against it.
const refuse = { warn: (_: unknown, message: string) => { throw new Error(`${message}: run node build.mjs first`); } } as unknown as Logger;
useFileBatches(fileBatchCalls(tmpdir(), refuse));
