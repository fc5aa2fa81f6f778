import { mkdirSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { appendFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { countInotifyWatches } from '../helpers/files.js';
import { waitFor } from '../helpers/proc.js';
import { useScratchServer } from '../helpers/scratch-server.js';
import { openWatch as openWatchOn, type OpenWatch } from './watch-client.js';

const scratch = useScratchServer('envd-watch-');
const openWatch = (path: string, recursive?: boolean) => openWatchOn(scratch.server.call, path, recursive);

/**
 * Writes a marker file into `dir` and waits for the watch to report it:
 * events are delivered in order, so everything before it has been reported too.
 */
async function settle(watch: OpenWatch, dir: string, name = `marker-${Math.random().toString(36).slice(2)}`) {
  const marker = join(dir, name);
  writeFileSync(marker, 'x');
  await waitFor(() => watch.has('create', marker), 5_000, `marker ${marker}`);
}

describe('POST /files/watch', () => {
  it('reports create, modify and delete with absolute paths', async () => {
    const watch = await openWatch(scratch.dir);
    const file = join(scratch.dir, 'a.txt');
    writeFileSync(file, 'one');
    await waitFor(() => watch.has('create', file), 5_000, 'create');
    await appendFile(file, 'two');
    await waitFor(() => watch.has('modify', file), 5_000, 'modify');
    await unlink(file);
    await waitFor(() => watch.has('delete', file), 5_000, 'delete');
    mkdirSync(join(scratch.dir, 'sub'));
    await waitFor(() => watch.has('create', join(scratch.dir, 'sub')), 5_000, 'create dir');
    await watch.close();
  });

  it('non-recursive reports only direct children; recursive reports nested changes', async () => {
    mkdirSync(join(scratch.dir, 'sub/deeper'), { recursive: true });
    const flat = await openWatch(scratch.dir);
    const deep = await openWatch(scratch.dir, true);
    const nested = join(scratch.dir, 'sub/deeper/n.txt');
    writeFileSync(nested, 'x');
    await waitFor(() => deep.has('create', nested), 5_000, 'nested create in the recursive watch');
    // A direct child written after the nested file: once the flat watch has seen it, it has seen everything before it.
    await settle(flat, scratch.dir);
    expect(flat.changes.some((c) => c.path.startsWith(join(scratch.dir, 'sub/')))).toBe(false);
    await Promise.all([flat.close(), deep.close()]);
  });

  it('watches / itself (its directory descriptor is the walk\'s shared one: the watch gets its own)', async () => {
    const watch = await openWatch('/');
    await watch.close();
    // And again: nothing of the first watch is left in the way.
    await (await openWatch('/')).close();
  });

  it('answers 404 for a missing directory and 400 for a file, as plain JSON', async () => {
    const missing = await scratch.server.json('POST', '/files/watch', { path: join(scratch.dir, 'nope') });
    expect(missing.status).toBe(404);
    writeFileSync(join(scratch.dir, 'f'), 'x');
    const file = await scratch.server.json('POST', '/files/watch', { path: join(scratch.dir, 'f') });
    expect(file.status).toBe(400);
    expect(file.body.message).toMatch(/not a directory/);
  });

  it('releases every inotify watch when clients disconnect (20 watches opened and closed)', async () => {
    mkdirSync(join(scratch.dir, 'a/b'), { recursive: true });
    const before = countInotifyWatches();
    const watches = [];
    for (let i = 0; i < 20; i++) watches.push(await openWatch(scratch.dir, i % 2 === 0));
    // Shared: one inotify watch per directory (the root, a, a/b, and the root's parent, which says when the root is removed), however many clients.
    expect(countInotifyWatches()).toBe(before + 4);
    await Promise.all(watches.map((w) => w.close()));
    await waitFor(() => countInotifyWatches() === before, 10_000, 'inotify watches released');
  });

  it('reports a subtree created and filled right after ready, and watches it from then on', async () => {
    const before = countInotifyWatches();
    const watch = await openWatch(scratch.dir, true);
    const levels = [join(scratch.dir, 'a'), join(scratch.dir, 'a/b'), join(scratch.dir, 'a/b/c')];
    // No pause anywhere: the directories exist and are filled before envd has read a single event.
    mkdirSync(levels[2]!, { recursive: true });
    const files = levels.flatMap((dir) => [join(dir, 'one.txt'), join(dir, 'two.txt')]);
    for (const file of files) writeFileSync(file, 'x');
    for (const path of [...levels, ...files]) await waitFor(() => watch.has('create', path), 5_000, `create ${path}`);
    expect(countInotifyWatches()).toBe(before + 5);
    const later = join(levels[2]!, 'later.txt');
    writeFileSync(later, 'x');
    await waitFor(() => watch.has('create', later), 5_000, 'a file created later in the new subtree');
    await watch.close();
    await waitFor(() => countInotifyWatches() === before, 10_000, 'inotify watches released');
  });

  it('reports a directory renamed into the tree with its contents, and renamed out as one delete, releasing its watches', async () => {
    const inside = join(scratch.dir, 'inside');
    const outside = join(scratch.dir, 'outside');
    mkdirSync(inside);
    mkdirSync(join(outside, 'moved/deeper'), { recursive: true });
    writeFileSync(join(outside, 'moved/x.txt'), 'x');
    writeFileSync(join(outside, 'moved/deeper/y.txt'), 'y');
    const before = countInotifyWatches();
    const watch = await openWatch(inside, true);

    const moved = join(inside, 'moved');
    renameSync(join(outside, 'moved'), moved);
    for (const path of [moved, join(moved, 'x.txt'), join(moved, 'deeper'), join(moved, 'deeper/y.txt')]) {
      await waitFor(() => watch.has('create', path), 5_000, `create ${path}`);
    }
    expect(countInotifyWatches()).toBe(before + 4);
    const z = join(moved, 'deeper/z.txt');
    writeFileSync(z, 'z');
    await waitFor(() => watch.has('create', z), 5_000, 'a file created in the moved-in directory');

    const back = join(outside, 'back');
    renameSync(moved, back);
    await waitFor(() => watch.has('delete', moved), 5_000, 'delete of the moved-out directory');
    await waitFor(() => countInotifyWatches() === before + 2, 5_000, 'the moved-out subtree released');
    // Changes in the directory where it lives now are none of this watch's business.
    writeFileSync(join(back, 'deeper/after.txt'), 'x');
    await settle(watch, inside);
    expect(watch.changes.filter((c) => c.path.includes('after.txt'))).toEqual([]);
    expect(watch.others).toEqual([]);
    await watch.close();
    await waitFor(() => countInotifyWatches() === before, 10_000, 'inotify watches released');
  });

  it('reports a deleted subtree and releases its watches; the watch goes on', async () => {
    const gone = join(scratch.dir, 'gone');
    mkdirSync(join(gone, 'a/b'), { recursive: true });
    writeFileSync(join(gone, 'a/b/f.txt'), 'x');
    const before = countInotifyWatches();
    const watch = await openWatch(scratch.dir, true);
    expect(countInotifyWatches()).toBe(before + 5);
    rmSync(gone, { recursive: true });
    for (const path of [join(gone, 'a/b/f.txt'), join(gone, 'a/b'), join(gone, 'a'), gone]) {
      await waitFor(() => watch.has('delete', path), 5_000, `delete ${path}`);
    }
    await waitFor(() => countInotifyWatches() === before + 2, 5_000, 'the deleted subtree released');
    await settle(watch, scratch.dir);
    mkdirSync(gone);
    await waitFor(() => watch.has('create', gone), 5_000, 'the directory created again');
    expect(watch.others).toEqual([]);
    await watch.close();
    await waitFor(() => countInotifyWatches() === before, 10_000, 'inotify watches released');
  });

  it('ends the stream with an error event when the watched directory is deleted, releasing everything', async () => {
    const root = join(scratch.dir, 'root');
    mkdirSync(join(root, 'sub'), { recursive: true });
    const before = countInotifyWatches();
    const watches = [await openWatch(root, true), await openWatch(root), await openWatch(join(root, 'sub'), true)];
    rmSync(root, { recursive: true });
    await Promise.all(watches.map((w) => w.ended));
    for (const watch of watches) {
      expect(watch.others).toHaveLength(1);
      expect(watch.others[0]!.event).toBe('error');
      expect(watch.others[0]!.data.message).toMatch(/the watched directory was deleted or moved away/);
    }
    expect(watches[0]!.has('delete', root)).toBe(true);
    await waitFor(() => countInotifyWatches() === before, 5_000, 'inotify watches released');
  });

  it('ends the stream with an error event when the watched directory is moved away', async () => {
    const root = join(scratch.dir, 'root');
    mkdirSync(root);
    const watch = await openWatch(root, true);
    renameSync(root, join(scratch.dir, 'elsewhere'));
    await watch.ended;
    expect(watch.others.map((e) => e.event)).toEqual(['error']);
    expect(watch.others[0]!.data.message).toBe(`${root}: the watched directory was deleted or moved away`);
  });

  it('does not follow symlinks: a link to a directory is reported, its target not watched', async () => {
    const target = join(scratch.dir, 'target');
    const tree = join(scratch.dir, 'tree');
    mkdirSync(join(target, 'inner'), { recursive: true });
    mkdirSync(tree);
    symlinkSync(target, join(tree, 'link'));
    const before = countInotifyWatches();
    const watch = await openWatch(tree, true);
    // The tree, and its parent (which says when the tree is removed).
    expect(countInotifyWatches()).toBe(before + 2);
    writeFileSync(join(target, 'inner/f.txt'), 'x');
    symlinkSync('/', join(tree, 'root-link'));
    await waitFor(() => watch.has('create', join(tree, 'root-link')), 5_000, 'the new symlink');
    await settle(watch, tree);
    expect(countInotifyWatches()).toBe(before + 2);
    expect(watch.changes.filter((c) => c.path.includes('inner'))).toEqual([]);
    await watch.close();
  });

  it('reports a file created and removed at once as create, then delete', async () => {
    const watch = await openWatch(scratch.dir);
    const temp = join(scratch.dir, 'temp.txt');
    // Both before envd reads either event (it runs in this process): one batch, told apart by replaying it.
    writeFileSync(temp, 'x');
    unlinkSync(temp);
    await waitFor(() => watch.has('delete', temp), 5_000, 'delete');
    expect(watch.changes.filter((c) => c.path === temp).map((c) => c.type)).toEqual(['create', 'modify', 'delete']);
    await watch.close();
  });
});
