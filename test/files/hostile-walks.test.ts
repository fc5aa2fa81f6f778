import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCanaries, type Canaries } from '../helpers/canaries.js';
import { sh } from '../helpers/files.js';
import { waitFor } from '../helpers/proc.js';
import { isRoot } from '../helpers/users.js';
import { startStressEnvd, type StressEnvd } from '../stress/harness.js';
import { openWatch } from './watch-client.js';

/**
 * Issue 36, the one rule, for the routes that walk or rename by path: a
 * batch's final renames, a listing's descent, and a watch's tree. A plain
 * user (envd's default user) owns the tree and swaps a directory, or one
 * above it, for a symlink to a directory of root's between envd's steps;
 * root's things must neither change nor be reported. envd runs as its own
 * process (dist/envd), as root.
 */

const q = (path: string) => `path=${encodeURIComponent(path)}`;
const within = (ms: number) => ({ signal: AbortSignal.timeout(ms) });
const attackers = new Set<ChildProcess>();

/** Runs `script` (CommonJS, node -e) as the user who owns `dir`, with `env`. */
function asUser(dir: string, script: string, env: Record<string, string>): ChildProcess {
  const { uid, gid } = statSync(dir);
  const child = spawn(process.execPath, ['-e', script], { uid, gid, env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit'] });
  attackers.add(child);
  return child;
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}

if (!isRoot()) console.warn('SKIPPED (not root): hostile-walk tests need root (a plain test user)');
describe.runIf(isRoot())('root follows no directory a plain user swaps for a symlink: batch, list and watch (36, the rule)', () => {
  let target: StressEnvd;
  let canaries: Canaries;
  let before: string;
  let user: { uid: number; gid: number };
  /** Root's own scratch directory (0755) for the directories of root's each test needs. */
  let roots: string;
  /** Runs a shell script as the user. */
  const asUserSh = (script: string) => sh('setpriv', [`--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', 'sh', '-c', script]);

  beforeAll(async () => {
    target = await startStressEnvd();
    canaries = makeCanaries();
    before = canaries.snapshot();
    user = statSync(target.dir);
    roots = mkdtempSync(join(tmpdir(), 'envd-roots-'));
    chmodSync(roots, 0o755);
  }, 60_000);
  afterAll(async () => {
    for (const child of attackers) await stop(child);
    await target?.stop();
    if (canaries) rmSync(canaries.root, { recursive: true, force: true });
    if (roots) rmSync(roots, { recursive: true, force: true });
  });

  it("renames a batch's files into the directory the user moved away, never over root's file in the directory its symlink names", async () => {
    // Root's file in a sticky world-writable directory (a /tmp): the user may add names there, not replace root's.
    const shared = join(roots, 'shared-tmp');
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    const rootFile = join(shared, 'f');
    writeFileSync(rootFile, 'root file\n', { mode: 0o644 });
    const home = join(target.dir, 'batch');
    asUserSh(`mkdir -p ${home}/d ${home}/e`);
    // The moment the batch's temporary file for d/f appears, the user moves d away, puts a file of its own by
    // that temporary name into the shared directory, and links d to it: a rename by path would then move the
    // user's file over root's.
    const swapper = asUser(
      home,
      `const fs = require('fs'); const path = require('path');
       const d = path.join(process.env.HOME_DIR, 'd');
       fs.writeFileSync(path.join(process.env.HOME_DIR, 'ready'), '');
       const tick = () => {
         const temp = fs.readdirSync(d).find((n) => /^\\.f\\.envd-.*\\.tmp$/.test(n));
         if (!temp) return setImmediate(tick);
         fs.renameSync(d, d + '.away');
         fs.writeFileSync(path.join(process.env.SHARED, temp), 'the user\\'s bytes\\n');
         fs.symlinkSync(process.env.SHARED, d);
       };
       tick();`,
      { HOME_DIR: home, SHARED: shared },
    );
    try {
      await waitFor(() => existsSync(join(home, 'ready')), 30_000, 'the swapper started');
      // Many other files, each written and synced, so that the swap lands between d/f's staging and the renames.
      const files = [{ path: join(home, 'd', 'f'), data: 'batch f\n' }, ...Array.from({ length: 200 }, (_, i) => ({ path: join(home, 'e', `x${i}`), data: 'x'.repeat(32 * 1024) }))];
      const response = await target.call('POST', '/files/batch', { files }, within(60_000));
      expect(response.status).toBeLessThan(500);
      await waitFor(() => existsSync(join(home, 'd.away')), 5_000, 'the swap');
    } finally {
      await stop(swapper);
    }
    expect(readFileSync(rootFile, 'utf8')).toBe('root file\n');
    expect(statSync(rootFile).uid).toBe(0);
    // The batch's file went where its directory went.
    expect(readFileSync(join(home, 'd.away', 'f'), 'utf8')).toBe('batch f\n');
    expect(canaries.snapshot()).toBe(before);
  }, 90_000);

  it("lists no entry of root's 0700 directory while the user keeps swapping subdirectories for symlinks to it", async () => {
    const tree = join(target.dir, 'list-tree');
    asUserSh(`mkdir -p ${tree} && cd ${tree} && for i in 0 1 2 3 4 5 6 7; do mkdir sub$i && echo x > sub$i/mine; done`);
    const swapper = asUser(
      tree,
      `const fs = require('fs'); const path = require('path');
       const tick = () => { for (let i = 0; i < 8; i++) {
         const sub = path.join(process.env.TREE, 'sub' + i);
         try { fs.renameSync(sub, sub + '.away'); fs.symlinkSync(process.env.CANARY, sub); for (let j = 0; j < 2000; j++); fs.unlinkSync(sub); fs.renameSync(sub + '.away', sub); } catch {}
       } setImmediate(tick); }; tick();`,
      { TREE: tree, CANARY: canaries.dir },
    );
    const leaked: string[] = [];
    try {
      for (let round = 0; round < 150; round++) {
        const response = await target.call('GET', `/files/list?${q(tree)}&depth=2`, undefined, within(10_000));
        expect(response.status).toBe(200);
        const { entries } = (await response.json()) as { entries: { path: string }[] };
        leaked.push(...entries.map((entry) => entry.path).filter((path) => path.includes('keep-')));
      }
    } finally {
      await stop(swapper);
    }
    expect(leaked).toEqual([]);
    expect(canaries.snapshot()).toBe(before);
  }, 120_000);

  it("goes on watching the user's own directories, and reports nothing of root's, when the user swaps a directory above them for a symlink", async () => {
    // Root's 0700 directory shaped like the user's tree, with a secret name where the user will make a directory.
    const outside = join(roots, 'outside');
    mkdirSync(join(outside, 'tree', 'sub', 'x'), { recursive: true, mode: 0o700 });
    chmodSync(outside, 0o700);
    writeFileSync(join(outside, 'tree', 'sub', 'x', 'root-secret-name'), 'secret\n', { mode: 0o600 });
    const home = join(target.dir, 'watch-home');
    const tree = join(home, 'proj', 'tree');
    asUserSh(`mkdir -p ${tree}/sub`);
    const watch = await openWatch(target.call, tree, true);
    try {
      // The project moves away and a symlink to root's directory takes its place; nothing under the tree
      // sees an event for that. Then a directory appears in the real tree, named like root's.
      asUserSh(`mv ${home}/proj ${home}/proj2 && ln -s ${outside} ${home}/proj && mkdir ${home}/proj2/tree/sub/x`);
      const x = join(tree, 'sub', 'x');
      await waitFor(() => watch.has('create', x), 5_000, 'the new directory');
      // The watch is on the user's x (proj2/tree/sub/x): what is made there is reported under the path asked for.
      asUserSh(`echo mine > ${home}/proj2/tree/sub/x/mine`);
      await waitFor(() => watch.has('create', join(x, 'mine')), 5_000, "a file in the user's new directory");
      writeFileSync(join(outside, 'tree', 'sub', 'x', 'root-later'), 'later\n');
      asUserSh(`echo marker > ${home}/proj2/tree/sub/x/marker`);
      await waitFor(() => watch.has('create', join(x, 'marker')), 5_000, 'the marker');
      expect(watch.changes.filter((change) => change.path.includes('root-'))).toEqual([]);
    } finally {
      await watch.close();
    }
  });

  it('answers 300 archive downloads of a tree whose file the user keeps swapping with a FIFO, and /health answers within 2 s throughout (36, item 6)', async () => {
    const home = join(target.dir, 'fifo-swap');
    const tree = join(home, 'tree');
    asUserSh(`mkdir -p ${tree}/sub && echo f > ${tree}/f && mkfifo ${home}/fifo && for i in 1 2 3 4 5 6 7 8; do echo s > ${tree}/sub/s$i; done`);
    // tree/f and the FIFO trade places by rename, as fast as the user can: a listing says "file", the open finds a FIFO.
    const swapper = asUser(
      home,
      `const fs = require('fs'); const path = require('path'); const at = (...n) => path.join(process.env.HOME_DIR, ...n);
       const tick = () => { try { fs.renameSync(at('tree', 'f'), at('f.away')); fs.renameSync(at('fifo'), at('tree', 'f')); fs.renameSync(at('tree', 'f'), at('fifo')); fs.renameSync(at('f.away'), at('tree', 'f')); } catch {} setImmediate(tick); };
       tick();`,
      { HOME_DIR: home },
    );
    let probing = true;
    const slowest = { health: 0 };
    const probe = (async () => {
      while (probing) {
        const started = Date.now();
        const response = await target.call('GET', '/health', undefined, within(10_000));
        expect(response.status).toBe(200);
        slowest.health = Math.max(slowest.health, Date.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    try {
      for (let round = 0; round < 30; round++) {
        const answers = await Promise.all(
          Array.from({ length: 10 }, (_, i) =>
            target.call('GET', `/files/archive?${q(tree)}${i % 2 ? '&format=tar.gz' : ''}`, undefined, within(20_000)).then(async (response) => {
              await response.arrayBuffer();
              return response.status;
            }),
          ),
        );
        expect(answers.every((status) => status === 200)).toBe(true);
      }
    } finally {
      probing = false;
      await probe;
      await stop(swapper);
    }
    // Generous for a loaded 2-core machine: a stalled event loop never answers at all.
    expect(slowest.health).toBeLessThan(2_000);
  }, 120_000);
});
