// Issue 36's proof for archives: random archives of files, directories,
// symlinks, hard links, `..`, absolute names, duplicates, pax and long names
// and modes, extracted into a target inside a scratch root full of canaries,
// through PUT /files/archive (as root for the plain default user and for
// root) and through `envd cp` (dist/envd, as root and as a plain user,
// fetching the archive from a stand-in server). Nothing outside the target
// changes; the target then holds the whole archive (each name as its last
// entry says, owned by whom it should be, directory modes exact, no setuid
// bit but where root extracted for root) or is as it was.
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import { chownSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join, posix } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { plantCanaries, runEnvd, snapshot, tarOf, withChecksums, type Entry } from '../helpers/archives.js';
import { PROPERTY_SEED } from '../helpers/output-integrity.js';
import { isRoot } from '../helpers/users.js';
import { report, startStressEnvd, type StressEnvd } from './harness.js';

const RUNS = Number(process.env.ENVD_FUZZ_RUNS ?? 150);

let target: StressEnvd;
/** The default user's ids (the stress envd's scratch directory is theirs). */
let user: { uid: number; gid: number };
const outcomes = new Map<string, number>();
beforeAll(async () => {
  target = await startStressEnvd();
  const info = statSync(target.dir);
  user = { uid: info.uid, gid: info.gid };
});
afterAll(async () => {
  report('archive property', { outcomes: JSON.stringify(Object.fromEntries(outcomes)) });
  await target?.stop();
});

// Few names, so that entries meet: a file where a directory was, beneath a link, the same name twice.
const usual = fc.constantFrom('a', 'b', 'd', 'd/e', 'd/e/f', 'l', 'l/x', 'y', 'y/pwned/a/b/file', './ok', 'a/./b', `${'long/'.repeat(40)}f`, `${'n'.repeat(200)}`);
const hostile = fc.constantFrom('../x', '../outside/canary.txt', '/abs', 'd/../../x', '..', '.', 'x'.repeat(300), 'l/l/x');
const name = fc.oneof({ arbitrary: usual, weight: 6 }, { arbitrary: hostile, weight: 1 }, { arbitrary: fc.string({ minLength: 1, maxLength: 12 }), weight: 1 });
const entry: fc.Arbitrary<Entry> = fc.record({
  name,
  type: fc.constantFrom('file', 'file', 'file', 'directory', 'directory', 'symlink', 'symlink', 'link'),
  linkname: fc.constantFrom('.', '..', 'l', 'l/l/../../outside', '../outside', '../../', '/', '/etc/passwd', 'a', 'a', 'd/e', 'missing', `${'t'.repeat(150)}`),
  mode: fc.constantFrom(0o644, 0o755, 0o555, 0o500, 0o700, 0o4755, 0o2775, 0o1777),
  body: fc.oneof({ arbitrary: fc.string({ maxLength: 40 }), weight: 9 }, { arbitrary: fc.constant('x'.repeat(300_000)), weight: 1 }),
}) as fc.Arbitrary<Entry>;
const archive = fc.array(entry, { minLength: 1, maxLength: 6 });

/** What a name holds after an accepted archive: its last entry, a hard link resolved to its file's bytes then. */
function expected(entries: Entry[]): Map<string, Entry> {
  const names = new Map<string, Entry>();
  for (const e of entries) {
    const n = posix.normalize(e.name).replace(/\/+$/, '');
    if (n === '.' || n === '' || e.name.startsWith('/')) continue;
    if (e.type === 'link') {
      const to = names.get(posix.normalize(e.linkname ?? '').replace(/\/+$/, ''));
      names.set(n, { name: n, type: 'file', body: to?.body, mode: to?.mode });
    } else names.set(n, { ...e, name: n });
  }
  return names;
}

/** The target holds what the archive said (and, merged, what was there before under other names). */
function holdsArchive(dir: string, entries: Entry[], owner: { uid: number }, keepSetId: boolean, existed: Set<string>): void {
  for (const [n, e] of expected(entries)) {
    const path = join(dir, n);
    const info = lstatSync(path);
    const what = `${n} (${e.type})`;
    if (!existed.has(n)) expect(info.uid, what).toBe(owner.uid);
    if (e.type === 'directory') {
      expect(info.isDirectory(), what).toBe(true);
      if (!existed.has(n)) expect((info.mode & 0o7777).toString(8), what).toBe((e.mode! & (keepSetId ? 0o7777 : 0o1777)).toString(8));
    } else if (e.type === 'symlink') {
      expect(info.isSymbolicLink(), what).toBe(true);
      expect(readlinkSync(path), what).toBe(e.linkname);
    } else {
      expect(info.isFile(), what).toBe(true);
      expect(sha(readFileSync(path)), what).toBe(sha(Buffer.from(e.body ?? '')));
      if (!keepSetId) expect(info.mode & 0o6000, what).toBe(0);
    }
  }
}

const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

let caseNumber = 0;
/** A case directory of canaries with the target `t` in it, pre-filled for a merge; all the user's when `owner` is given. */
function arena(merge: boolean, owner?: { uid: number; gid: number }): { root: string; dir: string; existed: Set<string> } {
  const root = join(target.dir, `case${caseNumber++}`);
  mkdirSync(root);
  plantCanaries(root);
  const dir = join(root, 't');
  const existed = new Set<string>();
  if (merge) {
    mkdirSync(join(dir, 'd/keep'), { recursive: true });
    writeFileSync(join(dir, 'a'), 'was here');
    writeFileSync(join(dir, 'd/keep/k'), 'kept');
    for (const name of ['d', 'd/keep', 'd/keep/k', 'a']) existed.add(name);
  }
  if (owner) chownTree(root, owner);
  return { root, dir, existed };
}

function chownTree(path: string, owner: { uid: number; gid: number }): void {
  chownSync(path, owner.uid, owner.gid);
  if (lstatSync(path).isDirectory()) for (const name of readdirSync(path)) chownTree(join(path, name), owner);
}

/** Everything around the target, and the target itself. */
function look(root: string, dir: string) {
  return { outside: snapshot(root, (n) => n === 't'), inside: existsSync(dir) ? snapshot(dir) : undefined, siblings: readdirSync(target.dir).length };
}

function judge(status: number, message: string, before: ReturnType<typeof look>, after: ReturnType<typeof look>, check: () => void, via: string): void {
  outcomes.set(`${via} ${status}`, (outcomes.get(`${via} ${status}`) ?? 0) + 1);
  expect(status, message).toBeLessThan(500);
  expect(after.outside).toEqual(before.outside);
  expect(after.siblings).toBe(before.siblings);
  if (status === 200) check();
  else expect(after.inside).toEqual(before.inside);
}

describe('random archives into a root of canaries', () => {
  it('through PUT /files/archive, as root for the plain default user and for root: nothing outside changes; the whole archive or nothing', async () => {
    await fc.assert(
      fc.asyncProperty(archive, fc.constantFrom('create', 'merge', 'replace'), fc.constantFrom(undefined, 'root'), async (entries, mode, username) => {
        const { root, dir, existed } = arena(mode !== 'create');
        const before = look(root, dir);
        const params = new URLSearchParams({ path: dir, mode, ...(username ? { username } : {}) });
        const res = await target.call('PUT', `/files/archive?${params}`, undefined, { body: new Uint8Array(await tarOf(entries)), headers: { 'content-type': 'application/x-tar' } });
        const answer = await res.json();
        const rootForRoot = isRoot() && username === 'root';
        const owner = rootForRoot || !isRoot() ? { uid: process.getuid!() } : user;
        judge(res.status, JSON.stringify(answer), before, look(root, dir), () => holdsArchive(dir, entries, owner, rootForRoot, mode === 'merge' ? existed : new Set()), `route ${mode}`);
      }),
      { numRuns: RUNS, seed: PROPERTY_SEED },
    );
  }, 600_000);

  describe('through envd cp (dist/envd) from a stand-in sandbox that serves the archive', () => {
    let sandbox: Server;
    let url: string;
    let served: Buffer = Buffer.alloc(0);
    beforeAll(async () => {
      sandbox = createServer((req, res) => {
        if (req.url?.startsWith('/files/info')) return void res.setHeader('content-type', 'application/json').end(JSON.stringify({ name: 't', path: '/remote/t', type: 'dir', size: 0, mode: 0o755, permissions: 'drwxr-xr-x', owner: 'root', group: 'root', modified_at: new Date().toISOString() }));
        if (req.url?.startsWith('/files/archive')) return void res.setHeader('content-type', 'application/x-tar').end(served);
        res.statusCode = 404;
        res.end('{"message":"no"}');
      });
      await new Promise<void>((resolve) => sandbox.listen(0, '127.0.0.1', resolve));
      const address = sandbox.address() as { port: number };
      url = `http://127.0.0.1:${address.port}`;
    });
    afterAll(() => new Promise<void>((resolve) => sandbox.close(() => resolve())));

    it.each(isRoot() ? ['root', 'a plain user'] : ['the running user'])('as %s: nothing outside changes; the whole archive or nothing', async (who) => {
      const as = who === 'a plain user' ? user : undefined;
      await fc.assert(
        fc.asyncProperty(archive, fc.boolean(), async (entries, merge) => {
          const { root, dir, existed } = arena(merge, as);
          const before = look(root, dir);
          served = withChecksums(await tarOf(entries), entries); // envd cp asks for, and checks, each file's sha256
          // Into the case directory under the source's name `t`: created, or merged into when it exists.
          const result = await runEnvd(['cp', ':/remote/t', root], { url, token: 'x' }, as);
          // A refusal names the entry, the body or the path; anything else (EACCES, a crash) counts as a 500.
          const status = result.code === 0 ? 200 : /^envd cp: (archive entry|body: not a valid|path: )/.test(result.stderr) ? 400 : 500;
          judge(status, result.stderr, before, look(root, dir), () => holdsArchive(dir, entries, as ?? { uid: process.getuid!() }, false, merge ? existed : new Set()), `cp ${merge ? 'merge' : 'create'}`);
        }),
        { numRuns: Math.ceil(RUNS / 3), seed: PROPERTY_SEED },
      );
    }, 600_000);
  });
});
