// Issue 30: every byte a command prints arrives, on every path, exactly as
// documented (test/helpers/output-integrity.ts). A fixed seed here; the stress
// suite runs the same property longer.
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
import {
  checkAcrossRestart,
  checkAttachAndWait,
  checkForeground,
  checkStream,
  checkTerminal,
  decodeKept,
  decodeOutput,
  outputCase,
  PROPERTY_SEED,
  SMALL_KEEPING,
  writerCommand,
} from '../helpers/output-integrity.js';
import { makeEnvdDirs, startServer, type TestServer } from '../helpers/server.js';

const RUNS = 5;

let user: Awaited<ReturnType<typeof commandUser>>;
let dir: string;
/** Direct output on (the default), default keeping. */
let direct: TestServer;
/** Direct output off, and a small cap and memory tier: every byte goes through envd, and results are cut. */
let throughEnvd: TestServer;
let restartDirs: ReturnType<typeof makeEnvdDirs>;
let restartable: TestServer;

beforeAll(async () => {
  user = await commandUser();
  dir = mkdtempSync(join(tmpdir(), 'envd-integrity-'));
  chownSync(dir, user.user.uid, user.user.gid);
  direct = await startServer({ defaultUser: user.user.name });
  throughEnvd = await startServer({ defaultUser: user.user.name, directOutput: false, ...SMALL_KEEPING });
  restartDirs = makeEnvdDirs();
  restartable = await startServer({ defaultUser: user.user.name, stateDir: restartDirs.stateDir, spoolDir: restartDirs.spoolDir });
});
afterAll(async () => {
  await direct?.close();
  await throughEnvd?.close();
  await restartable?.close();
  restartDirs?.remove();
  if (dir) rmSync(dir, { recursive: true, force: true });
  user?.remove();
});

describe('output integrity', () => {
  it('delivers exactly the decoded bytes on every path, direct output on and off, across a restart', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(outputCase, async (output) => {
        const cmd = writerCommand(dir, `case${n++}`, output);
        const all = decodeOutput(output.bytes);
        const whole = { expected: all, kept: all };
        await checkForeground(direct, cmd, whole);
        await checkStream(direct, cmd, whole);
        await checkTerminal(direct, cmd, whole);
        await checkAttachAndWait(direct, cmd, whole, { second: true });

        const cut = { expected: all, kept: decodeKept(output.bytes, SMALL_KEEPING.maxOutputBytes) };
        await checkForeground(throughEnvd, cmd, cut);
        await checkStream(throughEnvd, cmd, cut);
        await checkTerminal(throughEnvd, cmd, cut);
        await checkAttachAndWait(throughEnvd, cmd, cut);

        await checkAcrossRestart(restartable, async () => {
          await restartable.detach();
          restartable = await startServer({ defaultUser: user.user.name, stateDir: restartDirs.stateDir, spoolDir: restartDirs.spoolDir });
          return restartable;
        }, cmd, whole);
      }),
      { seed: PROPERTY_SEED, numRuns: RUNS, endOnFailure: true },
    );
  }, 300_000);
});
