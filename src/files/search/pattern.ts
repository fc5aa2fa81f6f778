import { setFlagsFromString } from 'node:v8';
import { badRequest } from '../../errors.js';
import { foldCase } from './fold-case.js';
import { requiredLiteral } from './required-literal.js';

// A pattern such as `(a+)+$` backtracks exponentially in V8's default engine.
// With these flags V8 runs a regex on its backtracking engine (fast) and, past
// 50,000 backtracks in one exec, finishes that exec on its linear-time engine
// instead: no pattern can stall envd's event loop for longer than a slice of
// the search (search.ts). The `l` flag asks for the linear engine outright;
// compiling with it tells whether a pattern can run there (backreferences
// cannot: a 400, as ripgrep's default engine refuses them too). Set here, at
// run time, so every way envd starts (single executable, node dist/envd.js,
// the tests' in-process servers) gets them; other regexes only gain the fallback.
setFlagsFromString('--enable-experimental-regexp-engine');
setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

export type CaseMode = 'smart' | 'sensitive' | 'insensitive';

/** How a line is searched: a byte needle to skip chunks without decoding them, and a regex over the decoded text. */
export interface Pattern {
  /** A chunk without these bytes has no match: a case-sensitive literal, or what every match of a case-sensitive regex contains. */
  needle: Buffer | undefined;
  literal: string | undefined;
  /** Global and multiline: searches a whole chunk of lines at once. */
  regex: RegExp;
  /** The same, to check one line alone when a chunk-wide match ran across a line end. */
  lineRegex: RegExp;
}

/** ripgrep's smart case: insensitive unless the pattern has an upper-case letter (escapes like `\W` do not count). */
export function isCaseSensitive(pattern: string, literal: boolean, mode: CaseMode): boolean {
  if (mode !== 'smart') return mode === 'sensitive';
  const letters = literal ? pattern : pattern.replace(/\\./g, '');
  return letters !== letters.toLowerCase();
}

const escapeRegex = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** Compiles a request's pattern; a pattern JavaScript cannot parse, or cannot run in linear time, is a 400. */
export function compilePattern(pattern: string, literal: boolean, mode: CaseMode): Pattern {
  const sensitive = isCaseSensitive(pattern, literal, mode);
  const exactSource = literal ? escapeRegex(pattern) : pattern;
  const source = sensitive ? exactSource : foldCase(exactSource);
  const flags = 'gm';
  try {
    // The pattern as given first: a syntax error names what the caller wrote, not the folded form.
    new RegExp(exactSource, flags);
    new RegExp(source, `${flags}l`);
  } catch (error) {
    throw badRequest(`pattern: ${(error as Error).message.replace(/^Invalid regular expression: /, '')}`);
  }
  const exact = literal && sensitive && pattern !== '';
  const required = exact ? pattern : sensitive && !literal ? requiredLiteral(pattern) : undefined;
  return {
    needle: required === undefined ? undefined : Buffer.from(required, 'utf8'),
    literal: exact ? pattern : undefined,
    regex: new RegExp(source, flags),
    lineRegex: new RegExp(source, flags),
  };
}
