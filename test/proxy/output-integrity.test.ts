// Issue 30: the output-integrity property through nginx configured as the
// control plane forwards (nginx.ts): every path delivers exactly the decoded
// bytes, with envd as its own process (direct output on, as deployed).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import {
  checkAttachAndWait,
  checkForeground,
  checkStream,
  checkTerminal,
  decodeOutput,
  outputCase,
  PROPERTY_SEED,
  writerCommand,
  type EnvdClient,
} from '../helpers/output-integrity.js';
import { startProxiedEnvd, type ProxiedEnvd } from './fixture.js';

const RUNS = 4;

let dir: string;
let proxied: ProxiedEnvd | undefined;

beforeAll(async () => {
  proxied = await startProxiedEnvd('proxy-integrity');
  ({ dir } = proxied);
});
afterAll(async () => {
  await proxied?.stop();
});

const client: EnvdClient = {
  call: (method, path, body, init) => proxied!.call(method, path, body, init),
  json: (method, path, body) => proxied!.json(method, path, body),
};

describe('output integrity through the proxy', () => {
  it('delivers exactly the decoded bytes on every path through nginx', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(outputCase, async (output) => {
        const cmd = writerCommand(dir, `case${n++}`, output);
        const all = decodeOutput(output.bytes);
        const whole = { expected: all, kept: all };
        await checkForeground(client, cmd, whole);
        await checkStream(client, cmd, whole);
        await checkTerminal(client, cmd, whole);
        await checkAttachAndWait(client, cmd, whole, { second: true });
      }),
      { seed: PROPERTY_SEED, numRuns: RUNS, endOnFailure: true },
    );
  }, 300_000);
});
