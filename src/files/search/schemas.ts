import { Type } from '@sinclair/typebox';

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

/** What POST /files/search streams (documentation only). */
export const SearchLines = Type.Unknown({
  description: 'application/x-ndjson: one {type:"match",path,line,column,text,before,after} per matching line, then {type:"summary",files_scanned,files_matched,matches,truncated,timed_out,elapsed_ms}',
});
/** What GET /files/find streams (documentation only: written entry by entry). */
export const FoundEntries = Type.Unknown({ description: 'application/json: {entries: [entry info...], truncated}' });
