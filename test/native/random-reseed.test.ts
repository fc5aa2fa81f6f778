import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { randomReseeder } from '../../src/native/malloc-trim.js';

// reseed() only mixes bytes into this process's OpenSSL generator: nothing of
// the machine changes. Whether forks then differ is the guest suite's proof.

function capturingLogger() {
  const lines: Array<{ level: number; msg: string }> = [];
  return { logger: createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) }), lines };
}

let stateDir: string | undefined;
afterEach(() => {
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  stateDir = undefined;
});

describe('randomReseeder', () => {
  it("reseeds OpenSSL's generator from the built addon, and randomBytes goes on giving distinct bytes", () => {
    stateDir = mkdtempSync(join(tmpdir(), 'envd-reseed-'));
    const { logger, lines } = capturingLogger();
    const reseed = randomReseeder(stateDir, logger);
    const before = randomBytes(32);
    expect(reseed(Buffer.alloc(32, 9))).toBe(true);
    expect(reseed(new Uint8Array(0))).toBe(true);
    const after = randomBytes(32);
    expect(after.equals(before)).toBe(false);
    expect(lines).toEqual([]);
  });

  it('says once that it cannot reseed when the addon is missing, and answers false', () => {
    stateDir = mkdtempSync(join(tmpdir(), 'envd-reseed-'));
    const { logger, lines } = capturingLogger();
    const reseed = randomReseeder(stateDir, logger, () => join(stateDir!, 'no-such-addon.node'));
    expect(reseed(Buffer.alloc(32))).toBe(false);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, msg: expect.stringContaining('reseed') });
  });
});
