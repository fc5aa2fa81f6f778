// Issue 30: the output-integrity property through nginx configured as the
// control plane forwards (nginx.ts): every path delivers exactly the decoded
// bytes, with envd as its own process (direct output on, as deployed).
import { randomBytes } from 'node:crypto';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { commandUser } from '../helpers/command-user.js';
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
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';
import { startNginx, type Nginx } from './nginx.js';

const SANDBOX = `sbx-${randomBytes(4).toString('hex')}`;
const token = randomBytes(16).toString('hex');
const RUNS = 4;

let envd: EnvdProcess;
let nginx: Nginx;
let dir: string;
let removeUser = () => {};

beforeAll(async () => {
  const made = await commandUser();
  removeUser = made.remove;
  dir = mkdtempSync(join(tmpdir(), 'envd-proxy-integrity-'));
  chownSync(dir, made.user.uid, made.user.gid);
  envd = await startEnvdProcess(['--default-user', made.user.name], { ENVD_ACCESS_TOKEN: token });
  nginx = await startNginx(envd.url, SANDBOX);
});
afterAll(async () => {
  await nginx?.stop();
  await envd?.stop();
  removeUser();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const client: EnvdClient = {
  call(method, path, body, init = {}) {
    const headers = new Headers(init.headers);
    headers.set('authorization', `Bearer ${token}`);
    if (body !== undefined) headers.set('content-type', 'application/json');
    return fetch(nginx.url + path, { ...init, method, headers, body: body === undefined ? init.body : JSON.stringify(body) });
  },
  async json(method, path, body) {
    const response = await client.call(method, path, body);
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  },
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
