import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { mallocTrimmer } from '../../src/native/malloc-trim.js';

// The trimmer loads the addon npm run build made (dist/envd-malloc-trim.node)
// when it is made, and runs glibc's malloc_trim; without the addon it says so
// once in the log and does nothing, so envd runs on.

function capturingLogger() {
  const lines: Array<{ level: number; msg: string }> = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

let stateDir: string | undefined;
afterEach(() => {
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  stateDir = undefined;
});

describe('mallocTrimmer', () => {
  it('loads the built addon when made and trims without a word', () => {
    stateDir = mkdtempSync(join(tmpdir(), 'envd-trim-'));
    const { logger, lines } = capturingLogger();
    const loaded = () => readFileSync('/proc/self/maps', 'utf8').includes('envd-malloc-trim.node');
    expect(loaded()).toBe(false);
    const trim = mallocTrimmer(stateDir, logger);
    expect(loaded()).toBe(true);
    trim();
    trim();
    expect(lines).toEqual([]);
  });

  it('says once that it cannot trim when the addon is missing, and its calls do nothing', () => {
    stateDir = mkdtempSync(join(tmpdir(), 'envd-trim-'));
    const { logger, lines } = capturingLogger();
    const trim = mallocTrimmer(stateDir, logger, () => join(stateDir!, 'no-such-addon.node'));
    trim();
    trim();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, msg: expect.stringContaining('malloc_trim') });
  });
});
