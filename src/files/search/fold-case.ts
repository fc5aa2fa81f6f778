/**
 * Makes a JavaScript regex source case-insensitive without the `i` flag:
 * every letter becomes a class of its cases (`a` -> `[aA]`, `[a-f]` ->
 * `[a-fA-F]`). V8's linear-time engine refuses `i`, and without it a lower
 * case `(a+)+$` (smart case: insensitive) could backtrack forever; folded, it
 * keeps the linear fallback (pattern.ts). Escapes, group names and Unicode
 * property names are copied untouched.
 */
export function foldCase(source: string): string {
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i]!;
    if (c === '\\') {
      const escape = escapeAt(source, i);
      out += escape;
      i += escape.length - 1;
      continue;
    }
    if (inClass) {
      if (c === ']') {
        inClass = false;
        out += c;
      } else if (source[i + 1] === '-' && source[i + 2] !== undefined && source[i + 2] !== ']' && source[i + 2] !== '\\') {
        const last = source[i + 2]!;
        out += `${c}-${last}${otherRange(c, last)}`;
        i += 2;
      } else out += c + other(c);
      continue;
    }
    if (c === '[') {
      inClass = true;
      out += c;
      if (source[i + 1] === '^') out += source[++i];
      // A `]` first in a class is a literal in JavaScript only as `[]` (empty): nothing to fold.
      continue;
    }
    if (c === '(' && source.startsWith('(?<', i) && source[i + 3] !== '=' && source[i + 3] !== '!') {
      const end = source.indexOf('>', i);
      out += source.slice(i, end + 1);
      i = end;
      continue;
    }
    const alt = other(c);
    out += alt === '' ? c : `[${c}${alt}]`;
  }
  return out;
}

/** The other case of a letter, or '' (not a letter, or its other case is not one character). */
function other(c: string): string {
  const upper = c.toUpperCase();
  const lower = c.toLowerCase();
  const alt = upper !== c ? upper : lower !== c ? lower : '';
  return alt.length === 1 ? alt : '';
}

/** `a-f` -> `A-F` when both ends are letters of one case. */
function otherRange(first: string, last: string): string {
  const a = other(first);
  const b = other(last);
  if (a === '' || b === '') return '';
  return a <= b ? `${a}-${b}` : '';
}

/** The whole escape starting at `at` (a backslash): `\u{…}`, `\p{…}`, `\uXXXX`, `\xXX`, `\cX`, `\k<…>` or `\` and one character. */
function escapeAt(source: string, at: number): string {
  const next = source[at + 1];
  if (next === undefined) return '\\';
  if ((next === 'p' || next === 'P' || next === 'u') && source[at + 2] === '{') return source.slice(at, source.indexOf('}', at) + 1 || source.length);
  if (next === 'k' && source[at + 2] === '<') return source.slice(at, source.indexOf('>', at) + 1 || source.length);
  if (next === 'u') return source.slice(at, at + 6);
  if (next === 'x') return source.slice(at, at + 4);
  if (next === 'c') return source.slice(at, at + 3);
  return source.slice(at, at + 2);
}
