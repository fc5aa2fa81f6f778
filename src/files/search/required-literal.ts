/**
 * The most telling run of plain characters every match of a regex must
 * contain (`Sync(` of `function\s+\w+Sync\(`: an upper-case letter and a
 * parenthesis are rarer than `function`'s letters), or undefined when none can be told
 * for sure. A chunk without it has no match: the search skips decoding it
 * and running the regex there, as it does for a literal (ripgrep extracts
 * literals the same way). Conservative: anything not understood ends a run
 * (classes, groups, escapes, quantifiers), and a top-level alternation or an
 * escape that spells a character by number gives no literal at all.
 */

/** Escaped characters that stand for themselves. */
const SELF_ESCAPES = new Set('()[]{}.*+?^$|\\/-'.split(''));
/** Escapes that match a class of characters or a position: they end a run, nothing more. */
const CLASS_ESCAPES = new Set('sSwWdDbBnrtfv'.split(''));
const QUANTIFIERS = new Set(['*', '+', '?', '{']);

/** How few chunks a run is likely to occur in, roughly: lower-case letters, digits and blanks are everywhere in text and code. */
const selectivity = (run: string) => run.length + 4 * run.replace(/[a-z0-9 ]/g, '').length;

export function requiredLiteral(source: string): string | undefined {
  let best = '';
  let run = '';
  const endRun = () => {
    if (run.length >= 2 && selectivity(run) > selectivity(best)) best = run;
    run = '';
  };
  for (let i = 0; i < source.length; ) {
    const c = source[i]!;
    let literal: string | undefined;
    let next = i + 1;
    if (c === '\\') {
      const escaped = source[i + 1];
      if (escaped === undefined) return undefined;
      if (SELF_ESCAPES.has(escaped)) literal = escaped;
      else if (!CLASS_ESCAPES.has(escaped)) return undefined; // \x41, \u{..}, \p{..}, \1, \k<..>, \cX: not worth understanding
      next = i + 2;
    } else if (c === '|') return undefined;
    else if (c === '[' || c === '(') {
      next = skipBracketed(source, i);
      if (next === -1) return undefined;
    } else if (!QUANTIFIERS.has(c) && c !== '.' && c !== '^' && c !== '$' && c.charCodeAt(0) < 0x80) literal = c;
    if (literal !== undefined && QUANTIFIERS.has(source[next] ?? '')) literal = undefined; // `ab*`: the b may be absent
    if (literal === undefined) endRun();
    else run += literal;
    // A quantifier's `{m,n}` is passed over whole.
    if (source[next] === '{') {
      const close = source.indexOf('}', next);
      next = close === -1 ? source.length : close + 1;
    }
    i = next;
  }
  endRun();
  return best.length >= 2 ? best : undefined;
}

/** The index after the class or group that opens at `start` (nested groups, escapes and classes inside), or -1 when it never closes. */
function skipBracketed(source: string, start: number): number {
  let depth = 0;
  let inClass = false;
  for (let i = start; i < source.length; i++) {
    const c = source[i];
    if (c === '\\') i++;
    else if (inClass) {
      if (c === ']') {
        inClass = false;
        if (depth === 0) return i + 1;
      }
    } else if (c === '[') inClass = true;
    else if (c === '(') depth++;
    else if (c === ')' && --depth === 0) return i + 1;
  }
  return -1;
}
