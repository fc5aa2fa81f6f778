import { EnvdClient, EnvdError } from '../client/index.js';
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
    const message = error instanceof EnvdError && error.status === 401 ? `bad or missing token (401: ${error.message})` : (error as Error).message;
    process.stderr.write(`envd ${verb}: ${message}\n`);
    return 1;
  }
}

export { CLI_HELP, VERBS };
