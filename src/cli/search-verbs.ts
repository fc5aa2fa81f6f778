import { type Common, help, parse, UsageError, type Verb } from './args.js';

/** Without a PATH the search starts at /: the remote side has no working directory of the CLI's. */
const DEFAULT_ROOT = '/';

function count(verb: string, flag: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^\d{1,9}$/.test(value)) throw new UsageError(`${verb}: ${flag} takes a whole number, got ${JSON.stringify(value)}`);
  return Number(value);
}

/** `envd grep`: grep -rn's line format (`path:line:text`, context lines `path-line-text`), stable for programs; --json the NDJSON events. */
const grep: Verb = async (argv, common) => {
  const { values, positionals } = parse('grep', argv, {
    'fixed-strings': { type: 'boolean', short: 'F' },
    'ignore-case': { type: 'boolean', short: 'i' },
    'case-sensitive': { type: 'boolean', short: 's' },
    glob: { type: 'string', short: 'g', multiple: true },
    context: { type: 'string', short: 'C' },
    'max-count': { type: 'string', short: 'm' },
    hidden: { type: 'boolean' },
    'no-ignore': { type: 'boolean' },
    user: { type: 'string' },
  });
  if (values.help || positionals.length === 0 || positionals.length > 2) return help('grep', common, !values.help);
  const globs = (values.glob as string[] | undefined) ?? [];
  const context = count('grep', '-C', values.context);
  const maxPerFile = count('grep', '-m', values['max-count']);
  const events = common.client.search.search({
    path: positionals[1] ?? DEFAULT_ROOT,
    pattern: positionals[0]!,
    literal: Boolean(values['fixed-strings']),
    case: values['ignore-case'] ? 'insensitive' : values['case-sensitive'] ? 'sensitive' : 'smart',
    include: globs,
    hidden: Boolean(values.hidden),
    gitignore: !values['no-ignore'],
    ...(context !== undefined ? { context } : {}),
    ...(maxPerFile !== undefined ? { max_per_file: maxPerFile } : {}),
    ...(values.user ? { username: values.user as string } : {}),
  });
  let matches = 0;
  for await (const event of events) {
    if (common.json) common.out(`${JSON.stringify(event)}\n`);
    else if (event.type === 'match') {
      const first = event.line - event.before.length;
      event.before.forEach((text, i) => common.out(`${event.path}-${first + i}-${text}\n`));
      common.out(`${event.path}:${event.line}:${event.text}\n`);
      event.after.forEach((text, i) => common.out(`${event.path}-${event.line + 1 + i}-${text}\n`));
    } else if (event.timed_out) process.stderr.write(`envd grep: stopped at the time budget after ${event.elapsed_ms} ms\n`);
    if (event.type === 'summary') matches = event.matches;
  }
  return matches > 0 ? 0 : 1;
};

/** `envd find`: one path per line; --json the whole answer. */
const find: Verb = async (argv, common) => {
  const { values, positionals } = parse('find', argv, {
    type: { type: 'string', short: 't' },
    'max-results': { type: 'string', short: 'n' },
    hidden: { type: 'boolean' },
    'no-ignore': { type: 'boolean' },
    user: { type: 'string' },
  });
  if (values.help || positionals.length === 0 || positionals.length > 2) return help('find', common, !values.help);
  const type = (values.type as string | undefined) ?? 'file';
  if (!['file', 'dir', 'any'].includes(type)) throw new UsageError(`find: -t takes file, dir or any, got ${JSON.stringify(type)}`);
  const max = count('find', '-n', values['max-results']);
  const found = await common.client.search.find({
    path: positionals[1] ?? DEFAULT_ROOT,
    glob: positionals[0]!,
    type: type as 'file' | 'dir' | 'any',
    hidden: Boolean(values.hidden),
    gitignore: !values['no-ignore'],
    ...(max !== undefined ? { max_results: max } : {}),
    ...(values.user ? { username: values.user as string } : {}),
  });
  if (common.json) common.out(`${JSON.stringify(found)}\n`);
  else for (const entry of found.entries) common.out(`${entry.path}${entry.type === 'dir' ? '/' : ''}\n`);
  if (found.truncated) process.stderr.write(`envd find: more entries than ${found.entries.length}; narrow the glob or raise -n\n`);
  return found.entries.length > 0 ? 0 : 1;
};

export const searchVerbs: Record<string, Verb> = { grep, find };
