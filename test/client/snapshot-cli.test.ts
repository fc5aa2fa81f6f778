import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommandCgroups } from '../../src/cgroups/command-cgroups.js';
import { EnvdClient, EnvdError } from '../../src/client/index.js';
import { startServer, type TestServer } from '../helpers/server.js';
import { runEnvd } from '../helpers/archives.js';

// The client's snapshot methods and `envd snapshot` (dist/envd as a child
// process) against an in-process envd whose cgroup tree is laid out in a
// temporary directory and whose jobs are recorded: nothing is synced or frozen.

let server: TestServer;
let dir: string;
let commands: string;
const jobs: string[][] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'envd-snapshot-cli-'));
  writeFileSync(join(dir, 'cgroup.controllers'), 'cpu memory pids\n');
  const cgroups = CommandCgroups.setUp(dir, undefined);
  commands = cgroups.commands;
  mkdirSync(commands, { recursive: true });
  writeFileSync(join(commands, 'cgroup.events'), 'frozen 1\n');
  server = await startServer({}, { cgroups: { mode: 'cgroup', cgroups }, machine: { snapshot: { job: async (args) => void jobs.push([...args]), selfCgroup: () => '0::/\n' } } });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

function envd(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return runEnvd(args, { url: server.url, token: server.token! });
}

describe('client.snapshot', () => {
  it('prepares and thaws, and a refused body is an EnvdError with the 400', async () => {
    const client = new EnvdClient({ url: server.url, token: server.token });
    const prepared = await client.snapshot.prepare({ freeze: 'commands', max_wait_ms: 500 });
    expect(prepared).toMatchObject({ frozen: 1, unconfirmed: 0, fs_frozen: [] });
    expect(readFileSync(join(commands, 'cgroup.freeze'), 'utf8')).toBe('1');
    expect(await client.snapshot.thaw()).toEqual({ thawed: 1, fs_thawed: [], by: 'request' });
    const refused = await client.snapshot.prepare({ thaw_after_ms: 1 }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(EnvdError);
    expect((refused as EnvdError).status).toBe(400);
  });
});

describe('envd snapshot (dist/envd as a child process)', () => {
  it('prepare prints one line of figures, --json the answer, and thaw what it thawed', async () => {
    const prepared = await envd(['snapshot', 'prepare', '--freeze', 'commands', '--thaw-after', '60000']);
    expect(prepared).toMatchObject({ code: 0, stderr: '' });
    expect(prepared.stdout).toMatch(/^1 cgroup\(s\) frozen; synced in [\d.]+ ms; 0\.0 MiB of cache dropped; envd RSS [\d.]+ → [\d.]+ MiB; took [\d.]+ ms\n$/);
    const json = await envd(['snapshot', 'prepare', '--json', '--freeze', 'none']);
    expect(JSON.parse(json.stdout)).toMatchObject({ frozen: 0, fs_frozen: [] });
    expect(await envd(['snapshot', 'thaw'])).toMatchObject({ code: 0, stdout: '1 cgroup(s) thawed\n' });
    expect(readFileSync(join(commands, 'cgroup.freeze'), 'utf8')).toBe('0');
  });

  it('says what is wrong with its arguments, exit 2, before asking envd', async () => {
    for (const args of [['snapshot'], ['snapshot', 'pause'], ['snapshot', 'prepare', '--freeze', 'some'], ['snapshot', 'prepare', '--max-wait', '2s']]) {
      const result = await envd(args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(/snapshot/);
    }
  });
});
