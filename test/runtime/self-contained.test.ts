// The self-contained runtime (issue 25 §1): dist/envd runs envd's Node through
// the loader and libraries in dist/runtime/lib, so it runs unchanged in an
// image without glibc (a busybox-only root), in one whose glibc is any other
// version (here a root whose loader, libc and ld.so.cache are garbage: envd
// loads none of them, so their version cannot matter), and on this host with
// an LD_PRELOAD and LD_LIBRARY_PATH that would break a normal Node. Commands
// envd starts see the image's own environment, none of envd's runtime.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/proc.js';

const DIST = join(process.cwd(), 'dist');
const BUSYBOX = '/bin/busybox';
/** By path: envd is started with an environment of the test's choosing, without PATH. */
const CHROOT = '/usr/sbin/chroot';
const TOKEN = 'runtime-test-token';


let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'envd-runtime-'));
});
afterAll(() => {
  for (const root of readdirSync(work)) {
    try {
      execFileSync('umount', ['-l', join(work, root, 'proc')], { stdio: 'ignore' });
    } catch {}
  }
  rmSync(work, { recursive: true, force: true });
});

/** Hard links where the file system allows (the runtime is 110 MB), copies elsewhere. */
function place(from: string, to: string): void {
  if (statSync(from).isDirectory()) {
    mkdirSync(to, { recursive: true });
    for (const name of readdirSync(from)) place(join(from, name), join(to, name));
    return;
  }
  try {
    linkSync(from, to);
  } catch {
    copyFileSync(from, to);
  }
}

/** A root with a static busybox as its only program, /etc/passwd, /dev/null, /proc, and envd in /opt/envd. */
function busyboxRoot(name: string): string {
  const root = join(work, name);
  for (const dir of ['bin', 'etc', 'opt/envd', 'tmp', 'proc', 'dev', 'root']) mkdirSync(join(root, dir), { recursive: true });
  copyFileSync(BUSYBOX, join(root, 'bin/busybox'));
  for (const applet of ['sh', 'env', 'cat', 'echo', 'id', 'ls', 'grep']) symlinkSync('busybox', join(root, 'bin', applet));
  writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  writeFileSync(join(root, 'etc/group'), 'root:x:0:\n');
  execFileSync('mknod', ['-m', '666', join(root, 'dev/null'), 'c', '1', '3']);
  place(join(DIST, 'envd'), join(root, 'opt/envd/envd'));
  place(join(DIST, 'runtime'), join(root, 'opt/envd/runtime'));
  execFileSync('mount', ['-t', 'proc', 'proc', join(root, 'proc')]);
  return root;
}

/** Starts envd (chrooted when `root` is given) with `env` as its whole environment; resolves once /health answers. */
async function startEnvd(root: string | undefined, env: Record<string, string>): Promise<{ port: number; child: ChildProcess; stop: () => Promise<void> }> {
  const port = await freePort();
  const envd = root ? '/opt/envd/envd' : join(DIST, 'envd');
  const args = [envd, '--host', '127.0.0.1', '--port', String(port), '--state-dir', '/tmp/envd-state', '--spool-dir', '/tmp/envd-spool', '--log-level', 'warn'];
  const child = root
    ? spawn(CHROOT, [root, ...args], { env: { ...env, ENVD_ACCESS_TOKEN: TOKEN }, stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn(args[0]!, [...args.slice(1, 7), '--state-dir', join(work, 'host-state'), '--spool-dir', join(work, 'host-spool'), '--log-level', 'warn'], { env: { ...env, ENVD_ACCESS_TOKEN: TOKEN }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break;
    } catch {}
    if (child.exitCode !== null || i > 300) throw new Error(`envd did not start: exit ${child.exitCode}\n${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    child,
    async stop() {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

async function run(port: number, cmd: string): Promise<{ stdout: string; stderr: string; exit_code: number }> {
  const res = await fetch(`http://127.0.0.1:${port}/commands`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ cmd }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { stdout: string; stderr: string; exit_code: number };
}

/** A preloaded library that ends any dynamically linked program it is loaded into. */
function abortingLibrary(): string {
  const source = join(work, 'abort.c');
  const library = join(work, 'libabort.so');
  writeFileSync(source, '#include <stdlib.h>\n__attribute__((constructor)) static void end(void) { abort(); }\n');
  execFileSync('cc', ['-shared', '-fPIC', '-o', library, source]);
  return library;
}

/** A program that runs argv[1] with argv[2..] as its whole environment, byte for byte (entries without "=" included). */
function rawEnvExec(): string {
  const source = join(work, 'raw-env.c');
  const program = join(work, 'raw-env');
  writeFileSync(source, '#include <unistd.h>\nint main(int argc, char **argv) { char *args[] = {argv[1], "--version", 0}; execve(argv[1], args, argv + 2); return 127; }\n');
  execFileSync('cc', ['-o', program, source]);
  return program;
}

describe('the self-contained runtime', () => {
  it('ships the loader and every library Node links, beside the Node runtime', () => {
    const libs = readdirSync(join(DIST, 'runtime/lib'));
    expect(libs).toEqual(expect.arrayContaining(['ld.so', 'libc.so.6', 'libstdc++.so.6', 'libm.so.6', 'libgcc_s.so.1']));
    expect(existsSync(join(DIST, 'runtime/envd-node'))).toBe(true);
    // The launcher itself links nothing: `file` would say "statically linked"; ldd says it is not dynamic.
    expect(() => execFileSync('ldd', [join(DIST, 'envd')], { stdio: 'pipe' })).toThrow();
  });

  it('runs in a busybox-only root: --version, a server, commands, a clean environment', async () => {
    const root = busyboxRoot('busybox');
    expect(execFileSync(CHROOT, [root, '/opt/envd/envd', '--version'], { env: {}, encoding: 'utf8' })).toBe('0.1.0\n');
    const envd = await startEnvd(root, { LD_PRELOAD: '/lib/nothing.so', LD_LIBRARY_PATH: '/nowhere', PATH: '/bin' });
    try {
      const result = await run(envd.port, 'env; echo maps: $(grep -c /opt/envd/runtime /proc/self/maps)');
      expect(result.exit_code).toBe(0);
      expect(result.stdout).toContain('maps: 0');
      expect(result.stdout).not.toMatch(/^LD_/m);
      expect(result.stdout).not.toContain('/opt/envd');
      // The malloc_trim addon, written to the state dir and loaded against the runtime's own libc.
      expect(readFileSync(`/proc/${envd.child.pid}/maps`, 'utf8')).toMatch(/envd-state\/bin\/envd-malloc-trim-[0-9a-f]{12}\.node/);
    } finally {
      await envd.stop();
    }
  });

  it('loads nothing of an image whose loader, libc and ld.so.cache are of another glibc (here: garbage)', async () => {
    const root = busyboxRoot('other-glibc');
    for (const file of ['lib64/ld-linux-x86-64.so.2', 'lib/x86_64-linux-gnu/libc.so.6', 'lib/x86_64-linux-gnu/libstdc++.so.6', 'etc/ld.so.cache']) {
      mkdirSync(join(root, file, '..'), { recursive: true });
      writeFileSync(join(root, file), 'not an ELF file: envd must never load this\n');
    }
    const envd = await startEnvd(root, { LD_LIBRARY_PATH: '/lib/x86_64-linux-gnu' });
    try {
      expect((await run(envd.port, 'echo works')).stdout).toBe('works\n');
      expect(readFileSync(`/proc/${envd.child.pid}/maps`, 'utf8')).toMatch(/envd-malloc-trim-[0-9a-f]{12}\.node/);
    } finally {
      await envd.stop();
    }
  });

  it("runs on this host with an LD_PRELOAD that aborts every dynamic program, and the image's LD_* never reach envd", async () => {
    const library = abortingLibrary();
    // The library works: a plain dynamically linked program dies of it.
    expect(() => execFileSync('/bin/true', { env: { LD_PRELOAD: library }, stdio: 'ignore' })).toThrow();
    const envd = await startEnvd(undefined, { LD_PRELOAD: library, LD_LIBRARY_PATH: work, PATH: process.env.PATH! });
    try {
      const result = await run(envd.port, 'echo "preload=[$LD_PRELOAD]"');
      expect(result).toMatchObject({ stdout: 'preload=[]\n', exit_code: 0 });
      // envd's process: the bundled loader and libraries, none of the host's.
      const maps = execFileSync('cat', [`/proc/${envd.child.pid}/maps`], { encoding: 'utf8' });
      expect(maps).toContain(join(DIST, 'runtime/lib/libc.so.6'));
      expect(maps).not.toMatch(/\/(usr\/)?lib\/x86_64-linux-gnu\/libc\.so\.6/);
      expect(maps).not.toContain('libabort');
    } finally {
      await envd.stop();
    }
  });

  // Issue 36 item 16: the environment comes from the image (envd.env). The launcher once
  // looped for ever on these, so `envd --version` never returned: the timeout fails a regression.
  it.each([
    ['an LD_ variable whose name is 256 characters or more', [`LD_${'A'.repeat(300)}=x`]],
    ['an LD_PRELOAD entry without "="', ['LD_PRELOAD']],
    ['both, between ordinary entries and an aborting LD_PRELOAD', ['PATH=/bin', `LD_${'B'.repeat(4096)}`, 'LD_PRELOAD', 'NOEQUALS', 'LD_PRELOAD=ABORT', 'LD_=x']],
  ])('drops %s and runs envd --version', (_, env) => {
    const library = abortingLibrary();
    const entries = env.map((entry) => entry.replace('ABORT', library));
    const result = spawnSync(rawEnvExec(), [join(DIST, 'envd'), ...entries], { encoding: 'utf8', timeout: 30_000 });
    expect(result.error).toBeUndefined();
    expect(result).toMatchObject({ status: 0, stdout: '0.1.0\n' });
  });
});
