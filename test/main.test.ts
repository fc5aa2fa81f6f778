import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startEnvdExecutable, startEnvdProcess, waitFor, type EnvdProcess } from './helpers/proc.js';
import { collectEvents, readEvents } from './helpers/sse.js';

const bundle = join(process.cwd(), 'dist/envd.js');
const empty = mkdtempSync(join(tmpdir(), 'envd-empty-'));
afterAll(() => rmSync(empty, { recursive: true, force: true }));

const runBundle = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(process.execPath, [bundle, ...args], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', timeout: 10_000 });

describe('the envd executable', () => {
  it('prints --version and --help and exits 0', () => {
    const version = runBundle(['--version']);
    expect(version.status).toBe(0);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    const help = runBundle(['--help']);
    expect(help.status).toBe(0);
    for (const flag of ['--host', '--port', '--access-token-file', '--default-user', '--default-workdir', '--max-output-bytes', '--log-level', 'ENVD_ACCESS_TOKEN']) {
      expect(help.stdout).toContain(flag);
    }
  });

  it('exits non-zero naming a bad option', () => {
    const result = runBundle(['--port', 'eighty']);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('--port');
    const fromEnv = runBundle([], { ENVD_MAX_OUTPUT_BYTES: 'lots' });
    expect(fromEnv.status).not.toBe(0);
    expect(fromEnv.stderr).toContain('ENVD_MAX_OUTPUT_BYTES');
  });

  it('runs from a directory with no node_modules (the bundle and the holder beside it) and exits 0 on SIGTERM', async () => {
    const copy = join(empty, 'envd.js');
    copyFileSync(bundle, copy);
    copyFileSync(join(dirname(bundle), 'envd-holder'), join(empty, 'envd-holder'));
    copyFileSync(join(dirname(bundle), 'envd-malloc-trim.node'), join(empty, 'envd-malloc-trim.node'));
    const envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok' }, empty, copy);
    const health = await fetch(`${envd.url}/health`);
    expect(health.status).toBe(200);
    const ran = await fetch(`${envd.url}/commands`, { method: 'POST', headers: { authorization: 'Bearer tok', 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'echo from-the-copy', user: 'root' }) });
    expect((await ran.json()).stdout).toBe('from-the-copy\n');
    // The malloc_trim addon beside the bundle, loaded at start.
    await waitFor(() => readFileSync(`/proc/${envd.child.pid}/maps`, 'utf8').includes(join(empty, 'envd-malloc-trim.node')));
    expect(await envd.stop('SIGTERM')).toBe(0);
    expect(envd.lines.every((line) => !line.includes('tok"'))).toBe(true);
    expect(envd.lines.filter((line) => line.includes('malloc_trim'))).toEqual([]);
  });

  it('the single executable writes its holder as <state-dir>/bin/envd-holder-<sha256 prefix> and runs commands with it', async () => {
    // The name's hash is computed at build time (no node:crypto at start): it must be the asset's own.
    const dirs = mkdtempSync(join(tmpdir(), 'envd-sea-'));
    const envd = await startEnvdExecutable(['--state-dir', join(dirs, 'state'), '--spool-dir', join(dirs, 'spool')], { ENVD_ACCESS_TOKEN: 'tok' });
    try {
      const holder = readFileSync('dist/envd-holder');
      const written = join(dirs, 'state', 'bin', `envd-holder-${createHash('sha256').update(holder).digest('hex').slice(0, 12)}`);
      expect(readFileSync(written).equals(holder)).toBe(true);
      const run = await fetch(`${envd.url}/commands`, { method: 'POST', headers: { authorization: 'Bearer tok', 'content-type': 'application/json' }, body: JSON.stringify({ cmd: 'echo hi' }) });
      expect(await run.json()).toMatchObject({ stdout: 'hi\n', exit_code: 0, reason: 'exited' });
      // The malloc_trim addon, written out the same way at start and loaded from there.
      const addon = readFileSync('dist/envd-malloc-trim.node');
      const addonWritten = join(dirs, 'state', 'bin', `envd-malloc-trim-${createHash('sha256').update(addon).digest('hex').slice(0, 12)}.node`);
      await waitFor(() => readFileSync(`/proc/${envd.child.pid}/maps`, 'utf8').includes(addonWritten));
      expect(readFileSync(addonWritten).equals(addon)).toBe(true);
    } finally {
      await envd.stop('SIGTERM');
      rmSync(dirs, { recursive: true, force: true });
    }
  });

  // build.mjs bundles ajv, fast-json-stringify's compiler and semver as stand-ins that load
  // the real module on first use: the first validation and the first serialized answer must still work.
  it.each([
    ['node dist/envd.js', () => startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok' })],
    ['dist/envd', () => startEnvdExecutable([], { ENVD_ACCESS_TOKEN: 'tok' })],
  ] as [string, () => Promise<EnvdProcess>][])('validates and serializes with the modules it loads on first use, run as %s', async (_how, start) => {
    const envd = await start();
    const dir = mkdtempSync(join(tmpdir(), 'envd-first-use-'));
    const call = (path: string, init: RequestInit = {}) => fetch(`${envd.url}${path}`, { ...init, headers: { authorization: 'Bearer tok', 'content-type': 'application/json' } });
    try {
      const health = await fetch(`${envd.url}/health`);
      expect(health.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(await health.json()).toEqual({ status: 'ok', version: expect.stringMatching(/^\d+\.\d+\.\d+$/) });

      const badBody = await call('/commands', { method: 'POST', body: JSON.stringify({ cmd: 'true', timeout: '5' }) });
      expect(badBody.status).toBe(400);
      expect(await badBody.json()).toEqual({ message: 'body/timeout must be number' });
      const badQuery = await call(`/files/list?path=${encodeURIComponent(dir)}&depth=deep`);
      expect(badQuery.status).toBe(400);
      expect(await badQuery.json()).toEqual({ message: 'querystring/depth must be integer' });

      const listed = await call(`/files/list?path=${encodeURIComponent(dir)}&depth=1`);
      expect(listed.status).toBe(200);
      expect(await listed.json()).toEqual({ entries: [] });
      const ran = await call('/commands', { method: 'POST', body: JSON.stringify({ cmd: 'echo first-use' }) });
      expect(await ran.json()).toEqual({ stdout: 'first-use\n', stderr: '', exit_code: 0, reason: 'exited' });
    } finally {
      await envd.stop('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // better-sse builds a Fetch Request and Response for every session; build.mjs gives it light
  // stand-ins, so a stream never loads Node's fetch implementation (undici: ~80 ms and ~17 MiB).
  it('streams a command and a watch without loading Node\'s fetch implementation', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'envd-sse-'));
    const preload = join(dir, 'report-modules.cjs');
    const report = join(dir, 'modules.json');
    writeFileSync(preload, `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(report)}, JSON.stringify(process.moduleLoadList)));\n`);
    const watched = join(dir, 'watched');
    mkdirSync(watched);
    const envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok', NODE_OPTIONS: `--require ${preload}` });
    const headers = { authorization: 'Bearer tok', 'content-type': 'application/json' };
    try {
      const stream = await fetch(`${envd.url}/commands/stream`, { method: 'POST', headers, body: JSON.stringify({ cmd: 'echo streamed' }) });
      expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
      expect(stream.headers.get('x-accel-buffering')).toBe('no');
      expect(stream.headers.get('cache-control')).toContain('no-cache');
      const events = await collectEvents(stream);
      expect(events.map((event) => event.event)).toEqual(['start', 'stdout', 'exit']);

      const watch = await fetch(`${envd.url}/files/watch`, { method: 'POST', headers, body: JSON.stringify({ path: watched }) });
      expect(watch.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = readEvents(watch);
      expect((await reader.next()).value).toMatchObject({ event: 'ready' });
      writeFileSync(join(watched, 'new-file'), 'x');
      expect((await reader.next()).value).toEqual({ event: 'change', data: { type: 'create', path: join(watched, 'new-file') } });
      // Leaving the loop cancels the body: the client disconnects.
      await reader.return(undefined);
    } finally {
      await envd.stop('SIGTERM');
    }
    try {
      const modules: string[] = JSON.parse(readFileSync(report, 'utf8'));
      expect(modules.length).toBeGreaterThan(10);
      expect(modules.filter((name) => name.includes('undici'))).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // ps, top, systemd-cgtop and the kernel's OOM messages show a process's comm
  // (its main thread's name); without a title the executable's reads "MainThread".
  it.each([
    ['node dist/envd.js', () => startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok' })],
    ['dist/envd', () => startEnvdExecutable([], { ENVD_ACCESS_TOKEN: 'tok' })],
  ] as [string, () => Promise<EnvdProcess>][])('names its process envd when run as %s', async (_how, start) => {
    const envd = await start();
    try {
      expect(readFileSync(`/proc/${envd.child.pid}/comm`, 'utf8')).toBe('envd\n');
      expect(readFileSync(`/proc/${envd.child.pid}/cmdline`, 'utf8').split('\0')[0]).toBe('envd');
      expect((await fetch(`${envd.url}/health`)).status).toBe(200);
    } finally {
      await envd.stop('SIGTERM');
    }
  });
});

/** The file system type of the mount a path is on, from /proc/self/mountinfo (the longest mount point above it). */
function mountType(path: string): string {
  let best = { point: '', type: '' };
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [left, right] = line.split(' - ');
    const point = left?.split(' ')[4]?.replace(/\\040/g, ' ');
    if (!point || !right) continue;
    const inside = path === point || path.startsWith(point === '/' ? '/' : `${point}/`);
    if (inside && point.length >= best.point.length) best = { point, type: right.split(' ')[0]! };
  }
  return best.type;
}

describe('the state directory check', () => {
  // An ext4 state directory halved exec throughput (docs/operations.md): envd says so once at start.
  it.each([
    ['in /dev/shm', () => mkdtempSync('/dev/shm/envd-state-check-')],
    ['beside the checkout', () => mkdtempSync(join(process.cwd(), '.envd-state-check-'))],
  ])('warns at start only when the state directory (%s) is not on a tmpfs', async (_where, make) => {
    const dirs = make();
    const envd = await startEnvdProcess(['--state-dir', join(dirs, 'state'), '--spool-dir', join(dirs, 'spool')], { ENVD_ACCESS_TOKEN: 'tok' });
    try {
      for (let waited = 0; !envd.lines.some((line) => line.includes('envd ready')) && waited < 5_000; waited += 20) await new Promise((r) => setTimeout(r, 20));
      const warned = envd.lines.some((line) => line.includes('the state directory is not on a tmpfs'));
      expect(warned, envd.lines.join('\n')).toBe(mountType(dirs) !== 'tmpfs');
    } finally {
      await envd.stop('SIGTERM');
      rmSync(dirs, { recursive: true, force: true });
    }
  });
});
