import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, linkSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProcesses, rssBytes, startEnvdProcess, waitFor, type EnvdProcess } from '../helpers/proc.js';
import { commandUser } from '../helpers/command-user.js';
import { makeEnvdDirs } from '../helpers/server.js';
import { isRoot } from '../helpers/users.js';
import { collectEvents, readEvents } from '../helpers/sse.js';

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

/** Live children of a process. */
/** A process's command line; empty once it has exited (the killed spawner may go between a listing and this read). */
function argvOf(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

function childrenOf(parent: number): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((entry) => {
      try {
        const rest = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]!.split(' ');
        return rest[0] !== 'Z' && Number(rest[1]) === parent;
      } catch {
        return false; // exited while we looked
      }
    })
    .map(Number);
}

const call = (path: string, body: unknown, init: RequestInit = {}) =>
  fetch(`${envd.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body), ...init });

/**
 * The build (and the Node that runs it) where any user can read it: a clone may sit under a 0700
 * directory (what mktemp -d makes), where the fixture user cannot reach dist/ or node_modules/.
 * The same files, hard-linked where they can be (copied across file systems).
 */
function readableRuntime(): { node: string; bundle: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'envd-runtime-'));
  chmodSync(dir, 0o755);
  const place = (from: string, name: string) => {
    try {
      linkSync(from, join(dir, name));
    } catch {
      copyFileSync(from, join(dir, name));
      chmodSync(join(dir, name), statSync(from).mode & 0o777);
    }
  };
  place(process.execPath, 'node');
  for (const name of ['envd.js', 'envd-holder', 'envd-malloc-trim.node', 'package.json']) place(join(process.cwd(), 'dist', name), name);
  return { node: join(dir, 'node'), bundle: join(dir, 'envd.js'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** dist/envd.js run as the fixture user (through setpriv when the tests run as root), so envd itself is not root. */
async function startUnprivilegedEnvd(): Promise<{ url: string; stop(): void }> {
  // Its own state and spool, the user's: its defaults would be /tmp/envd-<uid>, left behind for good.
  const dirs = makeEnvdDirs();
  const runtime = isRoot() ? readableRuntime() : { node: process.execPath, bundle: `${process.cwd()}/dist/envd.js`, remove: () => {} };
  if (isRoot()) chownSync(dirs.root, fixture.user.uid, fixture.user.gid);
  const args = [runtime.bundle, '--host', '127.0.0.1', '--port', '0', '--state-dir', dirs.stateDir, '--spool-dir', dirs.spoolDir];
  const env = { PATH: process.env.PATH, ENVD_ACCESS_TOKEN: TOKEN };
  const child = isRoot()
    ? spawn('setpriv', [`--reuid=${fixture.user.uid}`, `--regid=${fixture.user.gid}`, '--init-groups', '--', runtime.node, ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const stop = () => {
    child.kill('SIGKILL');
    dirs.remove();
    runtime.remove();
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`envd exited with ${code}`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const match = /listening at (http:\/\/[\d.]+:\d+)/.exec(line);
        if (match) resolve(match[1]!);
      });
    });
    return { url, stop };
  } catch (error) {
    // A failed start leaves nothing behind either (its directories were the /tmp/envd-dirs-* leak).
    stop();
    throw error;
  }
}

describe('envd as its own process', () => {
  it('without root, runs commands as its own user and refuses any other with 403', async () => {
    const unprivileged = await startUnprivilegedEnvd();
    try {
      const post = (body: unknown) =>
        fetch(`${unprivileged.url}/commands`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const own = await post({ cmd: 'id -un' });
      expect(await own.json()).toMatchObject({ stdout: `${fixture.user.name}\n`, exit_code: 0 });
      const other = await post({ cmd: 'id -un', user: 'root' });
      expect(other.status).toBe(403);
      expect((await other.json()).message).toMatch(/cannot run commands as "root"/);
    } finally {
      unprivileged.stop();
    }
  });

  it('never lets commands see ENVD_ACCESS_TOKEN or anything else of envd\'s environment', async () => {
    const result = await (await call('/commands', { cmd: 'env; cat /proc/$$/environ | tr "\\0" "\\n"' })).json();
    expect(result.exit_code).toBe(0);
    expect(result.stdout).toContain('HOME=');
    expect(result.stdout).not.toContain(TOKEN);
    expect(result.stdout).not.toContain('ENVD_');
  });

  it('starts commands through one holder spawner, and replaces it when it is killed', async () => {
    expect((await (await call('/commands', { cmd: 'echo first' })).json()).stdout).toBe('first\n');
    const spawners = () => childrenOf(envd.child.pid!).filter((pid) => argvOf(pid)[1] === '--spawner');
    const [spawner, ...more] = spawners();
    expect(spawner).toBeDefined();
    expect(more).toEqual([]);
    process.kill(spawner!, 'SIGKILL');
    await waitFor(() => !spawners().includes(spawner!), 5_000, 'the killed spawner to be reaped');
    expect((await (await call('/commands', { cmd: 'echo again' })).json()).stdout).toBe('again\n');
    expect(spawners()).toHaveLength(1);
  });

  it('releases every pipe and socket after commands, streams and attachers come and go', async () => {
    const pid = envd.child.pid!;
    const before = countNonSocketFds(pid);
    await Promise.all(Array.from({ length: 5 }, () => call('/commands', { cmd: 'echo x; echo y >&2' }).then((r) => r.json())));
    for (let i = 0; i < 3; i++) await collectEvents(await call('/commands/stream', { cmd: 'echo streamed' }));
    const { pid: bg } = await (await call('/commands', { cmd: 'read x; echo done', background: true, stdin: true })).json();
    for (let i = 0; i < 3; i++) {
      const abort = new AbortController();
      const attach = await fetch(`${envd.url}/commands/${bg}/stream`, { headers: { authorization: `Bearer ${TOKEN}` }, signal: abort.signal });
      await readEvents(attach).next();
      abort.abort();
    }
    await call(`/commands/${bg}/stdin`, { data: '\n' });
    await fetch(`${envd.url}/commands/${bg}/wait`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.json());
    // Pipes and /dev/null handles are what a command could leak; sockets are left out because
    // this test's fetch keeps its idle connections open for as long as envd's keep-alive allows.
    await waitFor(() => countNonSocketFds(pid) <= before, 10_000, `envd's pipe fds to return to ${before}`);
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

function countNonSocketFds(pid: number): number {
  let count = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (!readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) count++;
    } catch {
      // closed while we looked
    }
  }
  return count;
}
