import { dirname } from 'node:path';
import { judge, MAX_IGNORE_FILE_BYTES, parseRule, parseRules, type Rule, type Verdict } from './ignore-rules.js';
import type { SearchCalls } from '../../native/search-calls.js';
import { OpenDir, type DirEntry, type ListedChunk, type Name, type Reader } from './user-access.js';

/** Which entries a walk gives, by ripgrep's default rules unless turned off. */
export interface WalkOptions {
  /** Enter and give hidden entries (names starting with `.`). */
  hidden: boolean;
  /** Respect `.gitignore`, `.ignore` and `.git/info/exclude`. */
  gitignore: boolean;
  /** ripgrep's `-g` globs: an entry matching an include is taken whatever the ignore files say; `!glob` or an exclude leaves it out. */
  include: readonly string[];
  exclude: readonly string[];
  reader: Reader | undefined;
  /** The addon's openat, when it loaded (faster; the same rules either way). */
  searchCalls: SearchCalls | undefined;
}

/**
 * What a walk holds is bounded whatever the tree (a user's, so an
 * attacker's): at most WALK_MAX_DEPTH directories open at once, and the
 * listings on its stack take at most WALK_LISTING_BUDGET of names beside
 * LIST_CHUNK_MIN_BYTES a level. A directory past the depth is not entered,
 * and the walk says so (`WalkReport.tooDeep`): the answer is truncated.
 */
export const WALK_MAX_DEPTH = 256;
export const WALK_LISTING_BUDGET = 1024 * 1024;
/** One listing call's share: a directory whose names fit comes whole and sorted; a larger one in chunks (list-dir.c). */
export const LIST_CHUNK_MAX_BYTES = 256 * 1024;
export const LIST_CHUNK_MIN_BYTES = 4 * 1024;

/** What a walk left out: directories past WALK_MAX_DEPTH. */
export interface WalkReport {
  tooDeep: number;
}

export interface WalkEntry {
  dir: OpenDir;
  /** What opens it: the name, or its bytes when they are not UTF-8. */
  name: Name;
  /** Relative to the search root, slash-separated. */
  rel: string;
  isDir: boolean;
  /** The path's bytes relative to the root, when some name on it is not UTF-8 (`rel` is then lossy). */
  relBytes: Buffer | undefined;
  /** An include glob matched it (find lists directories only then, when it has globs). */
  included: boolean;
}

/** The ignore files of one directory, by ripgrep's precedence: `.ignore` over `.gitignore` over `.git/info/exclude`. */
interface Level {
  /** An entry's path (relative to the search root) becomes relative to this directory: drop `strip` characters, prepend `prefix`. */
  strip: number;
  prefix: string;
  ignore: Rule[];
  git: Rule[];
  exclude: Rule[];
  hasGit: boolean;
}

/** Include and exclude globs as one ordered rule list (ripgrep's `-g X` and `-g !X`): the last match wins, so an exclude beats an include. */
export function overrideRules(include: readonly string[], exclude: readonly string[]): Rule[] {
  const rules: Rule[] = [];
  for (const glob of include) {
    const rule = parseRule(glob);
    // In an ignore file `!` re-includes; among -g globs a plain glob includes and `!` excludes.
    if (rule) rules.push({ ...rule, negated: !rule.negated });
  }
  for (const glob of exclude) {
    const rule = parseRule(glob.startsWith('!') ? glob.slice(1) : glob);
    if (rule) rules.push({ ...rule, negated: false });
  }
  return rules;
}

/**
 * Walks a directory tree depth first, in name order, giving the files (and,
 * with `withDirs`, the directories) ripgrep would search. Synchronous, one
 * entry at a time: the caller decides when to yield to the event loop, and
 * `return()` on the generator closes every directory it holds open.
 */
export function* walkTree(root: OpenDir, options: WalkOptions, withDirs: boolean, report: WalkReport = { tooDeep: 0 }): Generator<WalkEntry, void, undefined> {
  const overrides = overrideRules(options.include, options.exclude);
  const hasIncludes = overrides.some((rule) => rule.negated);
  const levels = options.gitignore ? ancestorLevels(root.path, options.reader) : [];
  yield* walkDirectory(root, '', undefined, levels, { options, overrides, hasIncludes, withDirs, depth: 0, held: 0, report });
}

interface WalkContext {
  options: WalkOptions;
  overrides: Rule[];
  hasIncludes: boolean;
  withDirs: boolean;
  /** How many directories are open below the root, and the bytes of names their listings hold. */
  depth: number;
  held: number;
  report: WalkReport;
}

/** What the next listing call may hold: its share of what the stack's listings leave of the budget. */
const chunkBytes = (held: number) => Math.max(LIST_CHUNK_MIN_BYTES, Math.min(LIST_CHUNK_MAX_BYTES, WALK_LISTING_BUDGET - held));

function* walkDirectory(dir: OpenDir, rel: string, relBytes: Buffer | undefined, parents: Level[], context: WalkContext): Generator<WalkEntry, void, undefined> {
  let chunk = dir.listChunk(true, chunkBytes(context.held));
  if (!chunk) return;
  const { options } = context;
  // Only the ignore files the listing shows are opened: most directories have none, and a failed open costs an
  // exception. A directory listed in chunks may show them in a later one: all three are tried.
  const present = chunk.more ? IGNORE_NAMES : chunk.ignoreFilesMaybe ? ignoreNamesIn(chunk) : undefined;
  const levels = options.gitignore && present ? withLevel(parents, readLevel(dir, { strip: rel === '' ? 0 : rel.length + 1, prefix: '' }, options.reader, present)) : parents;
  context.held += chunk.bytes;
  try {
    for (;;) {
      yield* walkEntries(dir, chunk.entries, rel, relBytes, levels, context);
      if (!chunk.more) return;
      // The next part of a large directory: the one before is dropped, so the walk holds one part of it.
      context.held -= chunk.bytes;
      chunk = dir.listChunk(false, chunkBytes(context.held));
      if (!chunk) return;
      context.held += chunk.bytes;
    }
  } finally {
    if (chunk) context.held -= chunk.bytes;
  }
}

function* walkEntries(dir: OpenDir, entries: Iterable<DirEntry>, rel: string, relBytes: Buffer | undefined, levels: Level[], context: WalkContext): Generator<WalkEntry, void, undefined> {
  for (const entry of entries) {
    const { isDir } = entry;
    // Symlinks are not followed; FIFOs, sockets and devices are not searched.
    if (!isDir && !entry.isFile) continue;
    const childRel = rel === '' ? entry.name : `${rel}/${entry.name}`;
    const verdict = decide(childRel, entry.name, isDir, levels, context);
    if (verdict === 'ignore') continue;
    const name = entry.raw ?? entry.name;
    const childBytes = relBytes || entry.raw ? Buffer.concat([relBytes ?? Buffer.from(rel), Buffer.from(rel === '' ? '' : '/'), entry.raw ?? Buffer.from(entry.name)]) : undefined;
    const found: WalkEntry = { dir, name, rel: childRel, isDir, relBytes: childBytes, included: verdict === 'whitelist' };
    if (!isDir) {
      yield found;
      continue;
    }
    if (context.withDirs) yield found;
    if (context.depth === WALK_MAX_DEPTH) {
      context.report.tooDeep++;
      continue;
    }
    const child = dir.openChild(name, context.options.reader);
    if (!child) continue;
    context.depth++;
    try {
      yield* walkDirectory(child, childRel, childBytes, levels, context);
    } finally {
      context.depth--;
      child.close();
    }
  }
}

/** ripgrep's order: overrides (`-g`) first, then the ignore files, then hidden; a whitelist skips the later checks. */
function decide(rel: string, name: string, isDir: boolean, levels: Level[], context: WalkContext): Verdict {
  if (context.overrides.length > 0) {
    const verdict = judge(context.overrides, rel, isDir, name);
    if (verdict !== undefined) return verdict;
    // With includes, a file no include matched is left out; a directory is still entered.
    if (context.hasIncludes && !isDir) return 'ignore';
  }
  const ignored = levels.length > 0 ? judgeIgnoreFiles(rel, name, isDir, levels) : undefined;
  if (ignored !== undefined) return ignored;
  if (!context.options.hidden && name.startsWith('.')) return 'ignore';
  return undefined;
}

/**
 * The nearest directory's matching rule decides within each kind of file;
 * `.ignore` files beat `.gitignore` files at any depth. `.gitignore` counts
 * only inside a git repository, and not above the nearest one.
 */
function judgeIgnoreFiles(rel: string, name: string, isDir: boolean, levels: Level[]): Verdict {
  let fromIgnore: Verdict;
  let fromGit: Verdict;
  let fromExclude: Verdict;
  const anyGit = levels.some((level) => level.hasGit);
  let sawGit = false;
  for (let i = levels.length - 1; i >= 0; i--) {
    const level = levels[i]!;
    const path = relativeTo(level, rel);
    if (fromIgnore === undefined && level.ignore.length > 0) fromIgnore = judge(level.ignore, path, isDir, name);
    if (anyGit && !sawGit) {
      if (fromGit === undefined && level.git.length > 0) fromGit = judge(level.git, path, isDir, name);
      if (fromExclude === undefined && level.exclude.length > 0) fromExclude = judge(level.exclude, path, isDir, name);
    }
    sawGit ||= level.hasGit;
  }
  return fromIgnore ?? fromGit ?? fromExclude;
}

/** Most directories have no ignore file: they add no level. */
const withLevel = (levels: Level[], level: Level) =>
  level.hasGit || level.ignore.length > 0 || level.git.length > 0 ? [...levels, level] : levels;

const relativeTo = (level: Level, rel: string) => level.prefix + (level.strip === 0 ? rel : rel.slice(level.strip));

function readRules(dir: OpenDir, name: string, reader: Reader | undefined): Rule[] {
  const bytes = dir.readSmallFile(name, reader, MAX_IGNORE_FILE_BYTES);
  return bytes ? parseRules(bytes.toString('utf8')) : [];
}

const IGNORE_NAMES = new Set(['.git', '.gitignore', '.ignore']);

/** Which ignore names a listing holds; undefined: none. */
function ignoreNamesIn(chunk: ListedChunk): Set<string> | undefined {
  const present = new Set<string>();
  for (const entry of chunk.entries) if (IGNORE_NAMES.has(entry.name)) present.add(entry.name);
  return present.size > 0 ? present : undefined;
}

/** The ignore files of a directory; `present`: which of `.git`, `.gitignore`, `.ignore` its listing has (all when unknown). */
function readLevel(dir: OpenDir, place: Pick<Level, 'strip' | 'prefix'>, reader: Reader | undefined, present: ReadonlySet<string> = IGNORE_NAMES): Level {
  const hasGit = present.has('.git') && dir.statChild('.git') !== undefined;
  return {
    ...place,
    ignore: present.has('.ignore') ? readRules(dir, '.ignore', reader) : [],
    git: present.has('.gitignore') ? readRules(dir, '.gitignore', reader) : [],
    exclude: hasGit ? readExclude(dir, reader) : [],
    hasGit,
  };
}

function readExclude(dir: OpenDir, reader: Reader | undefined): Rule[] {
  const git = dir.openChild('.git', reader);
  if (!git) return [];
  try {
    const info = git.openChild('info', reader);
    if (!info) return [];
    try {
      return readRules(info, 'exclude', reader);
    } finally {
      info.close();
    }
  } finally {
    git.close();
  }
}

/** The ignore files of the root's ancestors, from `/` down: ripgrep reads them too. */
function ancestorLevels(root: string, reader: Reader | undefined): Level[] {
  const chain: string[] = [];
  for (let dir = root; dir !== '/'; ) {
    dir = dirname(dir);
    chain.unshift(dir);
  }
  const levels: Level[] = [];
  for (const path of chain) {
    const dir = OpenDir.openAncestor(path);
    if (!dir) continue;
    try {
      const level = readLevel(dir, { strip: 0, prefix: `${root.slice(path === '/' ? 1 : path.length + 1)}/` }, reader);
      levels.splice(0, levels.length, ...withLevel(levels, level));
    } finally {
      dir.close();
    }
  }
  return levels;
}
