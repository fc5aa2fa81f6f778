// Issue 30: the output-integrity property run longer, and with two CPU hogs
// beside it: starved of CPU, the holder must still read all a command wrote
// before it ended (pty buffers included), and envd must still deliver what a
// holder sent before it exited.
import { spawn, type ChildProcess } from 'node:child_process';
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

const RUNS = Number(process.env.ENVD_PROPERTY_RUNS ?? 40);

let user: Awaited<ReturnType<typeof commandUser>>;
let dir: string;
let direct: TestServer;
let throughEnvd: TestServer;
let restartDirs: ReturnType<typeof makeEnvdDirs>;
let restartable: TestServer;
const hogs: ChildProcess[] = [];

beforeAll(async () => {
  user = await commandUser();
  dir = mkdtempSync(join(tmpdir(), 'envd-integrity-'));
  chownSync(dir, user.user.uid, user.user.gid);
  direct = await startServer({ defaultUser: user.user.name });
  throughEnvd = await startServer({ defaultUser: user.user.name, directOutput: false, ...SMALL_KEEPING });
  restartDirs = makeEnvdDirs();
  restartable = await startServer({ defaultUser: user.user.name, stateDir: restartDirs.stateDir, spoolDir: restartDirs.spoolDir });
  for (let i = 0; i < 2; i++) hogs.push(spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }));
});
afterAll(async () => {
  for (const hog of hogs) hog.kill('SIGKILL');
  await direct?.close();
  await throughEnvd?.close();
  await restartable?.close();
  restartDirs?.remove();
  if (dir) rmSync(dir, { recursive: true, force: true });
  user?.remove();
});

describe('output integrity under load', () => {
  it('delivers exactly the decoded bytes on every path while the CPUs are busy', async () => {
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
        await checkStream(throughEnvd, cmd, cut);
        await checkTerminal(throughEnvd, cmd, cut);
        await checkAttachAndWait(throughEnvd, cmd, cut);
        await checkAcrossRestart(restartable, async () => {
          await restartable.detach();
          restartable = await startServer({ defaultUser: user.user.name, stateDir: restartDirs.stateDir, spoolDir: restartDirs.spoolDir });
          return restartable;
        }, cmd, whole);
      }),
      { seed: PROPERTY_SEED + 1, numRuns: RUNS, endOnFailure: true },
    );
  }, 900_000);
});
