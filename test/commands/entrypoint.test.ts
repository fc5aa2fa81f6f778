// The image's entrypoint (issue 25 §3, rootfs/image-to-template.mjs --entrypoint):
// envd starts it once per boot as a tracked background command, as the image's
// user, in its working directory, with its environment, and a restarted envd
// re-adopts it instead of starting it again. A broken file is logged, not fatal.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startEnvdExecutable, waitFor } from '../helpers/proc.js';

const dirs = mkdtempSync(join(tmpdir(), 'envd-entrypoint-'));
afterAll(() => rmSync(dirs, { recursive: true, force: true }));
const TOKEN = 'entrypoint-token';

async function list(url: string): Promise<any[]> {
  const res = await fetch(`${url}/commands`, { headers: { authorization: `Bearer ${TOKEN}` } });
  return ((await res.json()) as { processes: any[] }).processes;
}

describe('the image entrypoint', () => {
  it('starts once per boot as a tracked command with its user, directory and envs, and survives a restart', async () => {
    const file = join(dirs, 'entrypoint.json');
    writeFileSync(file, JSON.stringify({ args: ['/bin/sh', '-c', 'echo "$MODE in $(pwd) as $(id -un)"; sleep 600'], user: 'root', cwd: dirs, envs: { MODE: 'serving' } }));
    const args = ['--state-dir', join(dirs, 'state'), '--spool-dir', join(dirs, 'spool'), '--entrypoint-file', file];
    const first = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    let pid: number;
    try {
      await waitFor(async () => (await list(first.url)).length === 1, 5_000, 'the entrypoint listed');
      const [entry] = await list(first.url);
      expect(entry).toMatchObject({ cmd: '/bin/sh', args: ['-c', expect.stringContaining('sleep 600')], background: true, running: true });
      pid = entry.pid;
      const output = async () => (await fetch(`${first.url}/commands/${pid}/output?stream=stdout`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
      await waitFor(async () => (await output()) !== '', 5_000, 'the entrypoint printed');
      expect(await output()).toBe(`serving in ${dirs} as root\n`);
    } finally {
      await first.stop('SIGHUP'); // a restart: commands live on
    }
    const second = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    try {
      const listed = await list(second.url);
      expect(listed.map((p) => p.pid)).toEqual([pid]);
      const res = await fetch(`${second.url}/commands/${pid}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
      expect(res.status).toBe(200);
    } finally {
      await second.stop();
    }
  });

  it('logs a broken entrypoint file and serves on', async () => {
    const file = join(dirs, 'broken.json');
    writeFileSync(file, '{"args": 42');
    const envd = await startEnvdExecutable(['--entrypoint-file', file], { ENVD_ACCESS_TOKEN: TOKEN });
    try {
      await waitFor(() => envd.lines.some((line) => line.includes('the image entrypoint could not be started')), 5_000, 'the error logged');
      expect(await list(envd.url)).toEqual([]);
    } finally {
      await envd.stop();
    }
  });

  // Issue 36 item 17: the mark is written once the entrypoint has started, so a
  // failed start is tried again by the next envd of the boot, not lost until reboot.
  it('tries an entrypoint that could not start again when envd restarts', async () => {
    const file = join(dirs, 'retried.json');
    const cwd = join(dirs, 'made-later');
    writeFileSync(file, JSON.stringify({ args: ['/bin/sleep', '600'], cwd }));
    const args = ['--state-dir', join(dirs, 'retry-state'), '--spool-dir', join(dirs, 'retry-spool'), '--entrypoint-file', file];
    const first = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    try {
      await waitFor(() => first.lines.some((line) => line.includes('the image entrypoint could not be started')), 5_000, 'the failure logged');
      expect(await list(first.url)).toEqual([]);
    } finally {
      await first.stop();
    }
    mkdirSync(cwd);
    const second = await startEnvdExecutable(args, { ENVD_ACCESS_TOKEN: TOKEN });
    try {
      await waitFor(async () => (await list(second.url)).length === 1, 5_000, 'the entrypoint started on the second try');
      const [entry] = await list(second.url);
      await fetch(`${second.url}/commands/${entry.pid}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    } finally {
      await second.stop();
    }
  });

  it.each([
    ['a uid that /etc/passwd does not know', '4242', '4242 4242 /'],
    ['a uid:gid', '4242:4343', '4242 4343 /'],
    ["root's uid with a gid", '0:4343', '0 4343 /root'],
  ])('runs as %s (USER in the image config)', async (_, user, expected) => {
    const file = join(dirs, `numeric-${user.replace(':', '-')}.json`);
    writeFileSync(file, JSON.stringify({ args: ['/bin/sh', '-c', 'echo "$(id -u) $(id -g) $HOME"; sleep 600'], user }));
    const envd = await startEnvdExecutable(['--state-dir', join(dirs, `state-${user}`), '--spool-dir', join(dirs, `spool-${user}`), '--entrypoint-file', file], { ENVD_ACCESS_TOKEN: TOKEN });
    try {
      await waitFor(async () => (await list(envd.url)).length === 1, 5_000, 'the entrypoint listed');
      const [entry] = await list(envd.url);
      const output = async () => (await fetch(`${envd.url}/commands/${entry.pid}/output?stream=stdout`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
      await waitFor(async () => (await output()) !== '', 5_000, 'the entrypoint printed');
      expect(await output()).toBe(`${expected}\n`);
      await fetch(`${envd.url}/commands/${entry.pid}`, { method: 'DELETE', headers: { authorization: `Bearer ${TOKEN}` } });
    } finally {
      await envd.stop();
    }
  });
});
