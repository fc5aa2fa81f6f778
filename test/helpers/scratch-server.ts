import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { startServer, type TestServer } from './server.js';

export interface ScratchServer {
  server: TestServer;
  /** A fresh temporary directory for each test, removed after it. */
  dir: string;
}

/** Registers the hooks of a file-system test file: one envd for the file, a scratch directory per test. */
export function useScratchServer(prefix: string): ScratchServer {
  const scratch = {} as ScratchServer;
  beforeAll(async () => {
    scratch.server = await startServer();
  });
  afterAll(async () => scratch.server?.close());
  beforeEach(() => {
    scratch.dir = mkdtempSync(join(tmpdir(), prefix));
  });
  afterEach(() => rmSync(scratch.dir, { recursive: true, force: true }));
  return scratch;
}
