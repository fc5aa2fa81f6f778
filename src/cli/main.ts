import { EnvdClient, EnvdError } from '../client/index.js';
import { CLOSED_PIPE_STATUS, exitQuietlyOnClosedPipe, isClosedPipe } from './output.js';
import { CLI_HELP, UsageError, VERBS, verbs } from './verbs.js';

export const DEFAULT_URL = 'http://127.0.0.1:49983';

/** `envd completion bash|zsh`: completes the verbs. */
function completion(shell: string | undefined): string {
  const words = VERBS.join(' ');
  if (shell === 'bash') return `complete -W "${words}" envd\n`;
  if (shell === 'zsh') return `#compdef envd\n_arguments '1:verb:(${words})' '*::arg:_files'\n`;
  throw new UsageError('completion: give bash or zsh');
}

/** Takes --url, --token and --json out of the arguments (before any `--`), wherever they are. */
function common(argv: string[], env: NodeJS.ProcessEnv) {
  const rest: string[] = [];
  let url = env.ENVD_URL || DEFAULT_URL;
  let token = env.ENVD_TOKEN || env.ENVD_ACCESS_TOKEN || undefined;
  let json = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      rest.push(...argv.slice(i));
      break;
    }
    const [name, inline] = arg.startsWith('--') && arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined];
    if (name === '--json') json = true;
    else if (name === '--url' || name === '--token') {
      const value = inline ?? argv[++i];
      if (value === undefined) throw new UsageError(`${name} needs a value`);
      if (name === '--url') url = value;
      else token = value;
    } else rest.push(arg);
  }
  if (!/^https?:\/\/[^/]/.test(url)) throw new UsageError(`--url must be an http:// or https:// URL, got ${JSON.stringify(url)}`);
  return { rest, url, token, json };
}

/** The one line an error is on stderr: what went wrong and, where it can, what to do. */
function explain(error: unknown): string {
  if (error instanceof EnvdError && error.status === 401) return `bad or missing token (401: ${error.message}): give --token or ENVD_TOKEN`;
  const message = (error as Error).message;
  // fetch refuses the ports browsers block (the Fetch standard's "bad ports": 1, 7, 9, 21, 22, 25, ...) and says only this.
  if (error instanceof EnvdError && error.status === 0 && message.endsWith(': bad port')) return `${message.slice(0, -': bad port'.length)}: fetch refuses that port (one browsers block): run envd on another port, e.g. 49983`;
  return message;
}

/** Runs one verb; resolves with the exit status. Errors are one line on stderr, never a stack. */
export async function runCli(verb: string, argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  try {
    if (verb === 'completion') {
      process.stdout.write(completion(argv[0]));
      return 0;
    }
    const { rest, url, token, json } = common(argv, env);
    const run = verbs[verb];
    if (!run) throw new UsageError(`unknown verb ${verb}`);
    const client = new EnvdClient({ url, token });
    return await run(rest, { client, json, out: (text) => process.stdout.write(text) });
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`envd ${error.message}\nRun envd ${verb} --help for the options.\n`);
      return 2;
    }
    if (isClosedPipe(error)) return CLOSED_PIPE_STATUS;
    process.stderr.write(`envd ${verb}: ${explain(error)}\n`);
    return 1;
  }
}

/** Words other tools use for what a verb of envd does. */
const SYNONYMS: Record<string, string> = { status: 'ps', list: 'ps', run: 'exec', start: 'exec -d', stop: 'kill', tail: 'logs -f', log: 'logs', copy: 'cp', read: 'cat', dir: 'ls', sh: 'shell' };

/** The verb closest to a mistyped one (at most two edits from it or from a synonym), for "did you mean". */
export function closestVerb(word: string): string | undefined {
  const distance = (a: string, b: string): number => {
    let row = Array.from({ length: b.length + 1 }, (_, i) => i);
    for (let i = 1; i <= a.length; i++) {
      const next = [i];
      for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      row = next;
    }
    return row[b.length]!;
  };
  const words = [...VERBS.map((verb) => [verb, verb]), ...Object.entries(SYNONYMS)] as [string, string][];
  const [best] = words.map(([near, verb]) => ({ verb, d: distance(word.toLowerCase(), near) })).sort((x, y) => x.d - y.d);
  return best && best.d <= 2 ? best.verb : undefined;
}

export { CLI_HELP, exitQuietlyOnClosedPipe, VERBS };
