/**
 * gitignore patterns (gitignore(5)), as ripgrep reads them from `.gitignore`,
 * `.ignore` and `.git/info/exclude`, and as it reads `-g` globs: a pattern
 * without a slash matches a name at any depth, one with a slash is anchored to
 * its file's directory, `**` spans directories, a trailing `/` matches only
 * directories, a leading `!` re-includes.
 */

export interface Rule {
  /** Over the path relative to the rules' directory, or over the name alone when `nameOnly`. */
  regex: RegExp;
  /** A glob without a slash (after leading `**\/`): it matches a name at any depth, so only the name is tested. */
  nameOnly: boolean;
  /** `!pattern` in an ignore file; an include glob among overrides. */
  negated: boolean;
  dirOnly: boolean;
}

/** What the last matching rule says: ignore it, whitelist it, or nothing matched. */
export type Verdict = 'ignore' | 'whitelist' | undefined;

/** Ignore files this large are not read (a bound on work and memory; real ones are a few KiB). */
export const MAX_IGNORE_FILE_BYTES = 1024 * 1024;

/**
 * Translates one glob (already stripped of `!` and a trailing `/`) to a regex
 * over a slash-separated relative path; `nameOnly`: over the last name alone,
 * which is what a glob without a slash can match (and a third of find's time
 * went into trying `(?:.*\/)?` at every slash of every path).
 */
export function globToRegex(glob: string): { regex: RegExp; nameOnly: boolean } {
  let anchored = glob.includes('/');
  if (glob.startsWith('/')) glob = glob.slice(1);
  // `**/x` is `x` at any depth: the unanchored prefix alone (both would backtrack on every path).
  while (glob.startsWith('**/')) {
    anchored = false;
    glob = glob.slice(3);
  }
  // Only the path itself: like ripgrep, a directory's match is not inherited by its contents (the walk does not enter an ignored directory).
  const nameOnly = !anchored && !glob.includes('/');
  return { regex: new RegExp(`^${anchored || nameOnly ? '' : '(?:.*/)?'}${translate(glob)}$`, 's'), nameOnly };
}

/** The regex text of a glob: `*`, `?`, `**`, `[...]`, `{a,b}` (ripgrep's globs have alternatives; git's do not). */
function translate(glob: string): string {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        const atStart = i === 0 || glob[i - 1] === '/';
        const atEnd = i + 2 === glob.length || glob[i + 2] === '/';
        if (atStart && atEnd) {
          if (i + 2 === glob.length) out += '.*'; // `a/**`: everything inside
          else {
            out += '(?:.*/)?'; // `**/`: zero or more directories
            i++;
          }
          i++;
          continue;
        }
        i++; // `a**b`: as `*`
      }
      out += '[^/]*';
    } else if (c === '?') out += '[^/]';
    else if (c === '[') {
      const end = glob.indexOf(']', i + 2);
      if (end === -1) out += '\\[';
      else {
        let body = glob.slice(i + 1, end);
        const negate = body.startsWith('!') || body.startsWith('^');
        if (negate) body = body.slice(1);
        out += `[${negate ? '^/' : ''}${body.replace(/\\(?!.)|[\\\]^]/g, (m) => `\\${m}`).replace(/\\\\(.)/g, '\\$1')}]`;
        i = end;
      }
    } else if (c === '{' && glob.indexOf('}', i) !== -1) {
      const end = glob.indexOf('}', i);
      out += `(?:${glob.slice(i + 1, end).split(',').map(translate).join('|')})`;
      i = end;
    } else if (c === '\\' && i + 1 < glob.length) out += escape(glob[++i]!);
    else out += escape(c);
  }
  return out;
}

const escape = (c: string) => c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** One line of an ignore file as a rule; undefined for blanks and comments. */
export function parseRule(line: string): Rule | undefined {
  // Trailing spaces are dropped unless escaped; a CR of a CRLF file too.
  let text = line.replace(/\r$/, '').replace(/(?<!\\)\s+$/, '');
  if (text === '' || text.startsWith('#')) return undefined;
  let negated = false;
  if (text.startsWith('!')) {
    negated = true;
    text = text.slice(1);
  } else if (text.startsWith('\\!') || text.startsWith('\\#')) text = text.slice(1);
  let dirOnly = false;
  if (text.endsWith('/') && text.length > 1) {
    dirOnly = true;
    text = text.slice(0, -1);
  }
  if (text === '' || text === '/') return undefined;
  return { ...globToRegex(text), negated, dirOnly };
}

export function parseRules(text: string): Rule[] {
  return text.split('\n').flatMap((line) => parseRule(line) ?? []);
}

/** The last rule that matches decides: gitignore's "last match wins". `rel` is relative to the rules' directory, `name` its last name. */
export function judge(rules: readonly Rule[], rel: string, isDir: boolean, name: string): Verdict {
  for (let i = rules.length - 1; i >= 0; i--) {
    const rule = rules[i]!;
    if (rule.dirOnly && !isDir) continue;
    if (rule.regex.test(rule.nameOnly ? name : rel)) return rule.negated ? 'whitelist' : 'ignore';
  }
  return undefined;
}
