// The image's entrypoint (issue 25 §3, rootfs/image-to-template.mjs --entrypoint):
// envd starts it once per boot as a tracked background command, as the image's
// user, in its working directory, with its environment, and a restarted envd
// re-adopts it instead of starting it again. A broken file is logged, not fatal.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
});
