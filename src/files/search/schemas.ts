import { Type } from '@sinclair/typebox';
import { Entry } from '../schemas.js';

/** Bounds on a request's size and the work it can ask for; each is enforced by the schema and tested at its edge. */
export const MAX_PATTERN_CHARS = 10_000;
export const MAX_GLOBS = 100;
export const MAX_CONTEXT_LINES = 100;
export const DEFAULT_SEARCH_TIMEOUT_MS = 60_000;
export const MAX_SEARCH_TIMEOUT_MS = 600_000;
export const DEFAULT_FIND_RESULTS = 10_000;
export const MAX_FIND_RESULTS = 1_000_000;

const PathField = Type.String({ description: 'absolute path: a directory, or one file' });
const Username = Type.String({ description: 'whose permissions the search has; default: default_user' });
const Globs = Type.Array(Type.String({ minLength: 1, maxLength: 4096 }), { maxItems: MAX_GLOBS, description: "ripgrep -g globs, relative to path; `**` spans directories, a glob without `/` matches a name at any depth" });

export const SearchBody = Type.Object(
  {
    path: PathField,
    pattern: Type.String({ maxLength: MAX_PATTERN_CHARS, description: 'a JavaScript regular expression (no backreferences), or a literal string with literal: true' }),
    literal: Type.Optional(Type.Boolean({ default: false })),
    case: Type.Optional(Type.Unsafe<'smart' | 'sensitive' | 'insensitive'>(Type.String({ enum: ['smart', 'sensitive', 'insensitive'], default: 'smart', description: 'smart: insensitive unless the pattern has an upper-case letter' }))),
    include: Type.Optional(Globs),
    exclude: Type.Optional(Globs),
    hidden: Type.Optional(Type.Boolean({ default: false, description: 'also search hidden files and directories' })),
    gitignore: Type.Optional(Type.Boolean({ default: true, description: 'respect .gitignore, .ignore and .git/info/exclude' })),
    max_results: Type.Optional(Type.Integer({ minimum: 1, description: 'stop after this many matching lines (summary.truncated)' })),
    max_per_file: Type.Optional(Type.Integer({ minimum: 1, description: 'at most this many matching lines per file' })),
    context: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_CONTEXT_LINES, default: 0, description: 'lines before and after each match' })),
    max_file_bytes: Type.Optional(Type.Integer({ minimum: 1, description: 'skip files larger than this' })),
    timeout_ms: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_SEARCH_TIMEOUT_MS, default: DEFAULT_SEARCH_TIMEOUT_MS })),
    username: Type.Optional(Username),
  },
  { additionalProperties: false },
);

export const FindQuery = Type.Object({
  path: PathField,
  glob: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, description: 'ripgrep --files -g GLOB; `!glob` lists what does not match' })),
  type: Type.Optional(Type.Unsafe<'file' | 'dir' | 'any'>(Type.String({ enum: ['file', 'dir', 'any'], default: 'file' }))),
  max_results: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_FIND_RESULTS, default: DEFAULT_FIND_RESULTS })),
  gitignore: Type.Optional(Type.Boolean({ default: true })),
  hidden: Type.Optional(Type.Boolean({ default: false })),
  username: Type.Optional(Username),
});

const PathBase64 = Type.Optional(Type.String({ description: 'the exact bytes of a path that is not UTF-8 (`path` shows U+FFFD in their place)' }));

/**
 * One line of what POST /files/search streams (documentation only: the route
 * writes NDJSON itself): a match per matching line, then the summary.
 */
export const SearchLine = Type.Union(
  [
    Type.Object(
      {
        type: Type.Literal('match'),
        path: Type.String(),
        path_base64: PathBase64,
        line: Type.Integer({ description: '1-based line number' }),
        column: Type.Integer({ description: '1-based byte offset of the first match in the line (ripgrep --column)' }),
        text: Type.String(),
        before: Type.Array(Type.String(), { description: '`context` lines before' }),
        after: Type.Array(Type.String(), { description: '`context` lines after' }),
      },
      { title: 'SearchMatch' },
    ),
    Type.Object(
      {
        type: Type.Literal('summary'),
        files_scanned: Type.Integer(),
        files_matched: Type.Integer(),
        matches: Type.Integer(),
        truncated: Type.Boolean({ description: 'max_results was reached, or the time ran out (timed_out)' }),
        timed_out: Type.Boolean(),
        elapsed_ms: Type.Integer(),
      },
      { title: 'SearchSummary' },
    ),
  ],
  { description: 'application/x-ndjson: one SearchMatch line per matching line as it is found, then one SearchSummary line' },
);

/** What GET /files/find streams (documentation only: written entry by entry). */
export const FoundEntries = Type.Object(
  {
    entries: Type.Array(Type.Composite([Entry, Type.Object({ path_base64: PathBase64 })], { title: 'FoundEntry' })),
    truncated: Type.Boolean({ description: 'max_results was reached' }),
  },
  { title: 'FoundEntries' },
);
