// Issue 44: a second `npm start` refuses before it touches anything, says why,
// and leaves the running instance's token alone.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const script = resolve('scripts/start-local.mjs');
let dir: string;
const cleanups: (() => void)[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'envd-start-local-'));
  mkdirSync(join(dir, '.local'), { mode: 0o700 });
  writeFileSync(join(dir, '.local', 'token'), 'the-running-token', { mode: 0o600 });
});
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** `npm start` in the clone `dir` (its cwd): the script as npm runs it. */
const start = (port: number) => spawnSync(process.execPath, [script], { cwd: dir, env: { ...process.env, ENVD_PORT: String(port) }, encoding: 'utf8', timeout: 30_000 });

async function listening(): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  cleanups.push(() => server.close());
  return { server, port: (server.address() as { port: number }).port };
}

describe('npm start when another envd has the port or the state dir', () => {
  it('refuses when the port is taken, naming it, before the build and the token', async () => {
    const { port } = await listening();
    const r = start(port);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(`npm start: port ${port} on 127.0.0.1 is taken; nothing was changed (${join(dir, '.local', 'token')} is as it was). Stop what listens there, or choose another: ENVD_PORT=49984 npm start\n`);
    expect(readFileSync(join(dir, '.local', 'token'), 'utf8')).toBe('the-running-token');
    expect(existsSync(join(dir, '.local', 'envd.lock'))).toBe(false);
    expect(existsSync(join(dir, '.local', 'state'))).toBe(false);
  });

  it('refuses when a live npm start holds the state dir (even on another port), naming its pid', async () => {
    // A stand-in for the running `npm start`: a live process whose command line is the script's.
    const running = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'scripts/start-local.mjs'], { stdio: 'ignore' });
    cleanups.push(() => running.kill('SIGKILL'));
    writeFileSync(join(dir, '.local', 'envd.lock'), JSON.stringify({ pid: running.pid, port: 49983 }));
    const { server, port } = await listening();
    server.close();
    const r = start(port);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`is in use by a running envd \\(npm start pid ${running.pid}\\); its token stays in .*token\\. Stop it first \\(kill ${running.pid}\\)`));
    expect(readFileSync(join(dir, '.local', 'token'), 'utf8')).toBe('the-running-token');
    expect(JSON.parse(readFileSync(join(dir, '.local', 'envd.lock'), 'utf8')).pid).toBe(running.pid);
  });

  it('takes over a lock whose npm start is gone (then still refuses the taken port, and leaves no lock)', async () => {
    writeFileSync(join(dir, '.local', 'envd.lock'), JSON.stringify({ pid: 4_000_000, port: 49983 }));
    const { port } = await listening();
    const r = start(port);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/port .* is taken/);
    expect(existsSync(join(dir, '.local', 'envd.lock'))).toBe(false);
  });
});
