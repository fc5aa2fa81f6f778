import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProcesses, rssBytes, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { commandUser } from '../helpers/command-user.js';
import { readEvents } from '../helpers/sse.js';

const TOKEN = `secret-${randomBytes(8).toString('hex')}`;
let envd: EnvdProcess;
let fixture: Awaited<ReturnType<typeof commandUser>>;

beforeAll(async () => {
  fixture = await commandUser();
  envd = await startEnvdProcess(['--default-user', fixture.user.name], { ENVD_ACCESS_TOKEN: TOKEN, ENVD_PRIVATE_SETTING: 'envd-only' });
});
afterAll(async () => {
  await envd?.stop('SIGKILL');
  fixture?.remove();
});

const call = (path: string, body: unknown, init: RequestInit = {}) =>
  fetch(`${envd.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body), ...init });

describe('envd as its own process', () => {
  it('never lets commands see ENVD_ACCESS_TOKEN or anything else of envd\'s environment', async () => {
    const result = await (await call('/commands', { cmd: 'env; cat /proc/$$/environ | tr "\\0" "\\n"' })).json();
    expect(result.exit_code).toBe(0);
    expect(result.stdout).toContain('HOME=');
    expect(result.stdout).not.toContain(TOKEN);
    expect(result.stdout).not.toContain('ENVD_');
  });

  it('a stalled stream reader blocks the command instead of growing envd\'s memory', async () => {
    const suffix = randomBytes(4).toString('hex');
    const marker = `envd-bp-${suffix}`;
    const abort = new AbortController();
    // 1 GB of output if nothing held it back; the writer is named by the marker.
    const cmd = `export P=envd-bp- S=${suffix}; bash -c 'exec -a "$P$S" head -c 1000000000 /dev/zero'`;
    const response = await call('/commands/stream', { cmd }, { signal: abort.signal });
    const events = readEvents(response);
    await events.next(); // start
    await events.next(); // first output: the command is writing
    const before = rssBytes(envd.child.pid!);
    // Not reading any more: give the command time to push as much as it can.
    await new Promise((r) => setTimeout(r, 2_000));
    const after = rssBytes(envd.child.pid!);
    expect(after - before).toBeLessThan(16 * 1024 * 1024);
    // The writer is still there, held back by its pipe: it wrote a small part of its gigabyte.
    const [writer] = findProcesses(marker);
    expect(writer).toBeDefined();
    const written = Number(/wchar: (\d+)/.exec(readFileSync(`/proc/${writer}/io`, 'utf8'))![1]);
    expect(written).toBeLessThan(64 * 1024 * 1024);
    abort.abort();
    await waitFor(() => findProcesses(marker).length === 0, 5_000, 'the writer to be killed');
  });
});
