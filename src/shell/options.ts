import { parseArgs } from 'node:util';

export const DEFAULT_SHELL_URL = 'http://127.0.0.1:49983';

export const SHELL_HELP = `envd shell — an interactive terminal on an envd, for debugging a sandbox

Usage: envd shell [--url URL] [--token T] [--user U] [--cwd DIR] [-- CMD...]

  --url <url>     envd, or the control plane's path to it (default: $ENVD_URL, else ${DEFAULT_SHELL_URL});
                  e.g. https://api.example/sandboxes/ID
  --token <t>     the access token (default: $ENVD_TOKEN, as every verb reads it)
  --user <name>   Unix user of the shell (default: envd's default user)
  --cwd <dir>     working directory (default: the user's home or envd's default)
  -- CMD...       run CMD on the terminal instead of the user's login shell

The local terminal is raw until the remote side ends; envd shell exits with its exit code.
`;

export interface ShellOptions {
  url: string;
  token: string | undefined;
  user: string | undefined;
  cwd: string | undefined;
  /** The command line to run, or '' for the user's interactive login shell. */
  cmd: string;
}

export class ShellUsageError extends Error {}

/** Reads `envd shell`'s arguments (everything after the word `shell`). Returns undefined for --help. */
export function parseShellArgs(argv: string[], env: NodeJS.ProcessEnv): ShellOptions | undefined {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: { url: { type: 'string' }, token: { type: 'string' }, user: { type: 'string' }, cwd: { type: 'string' }, help: { type: 'boolean' } },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw new ShellUsageError((error as Error).message);
  }
  if (parsed.values.help) return undefined;
  // The same environment as every other verb (src/cli/main.ts); ENVD_ACCESS_TOKEN is the daemon's own name for it.
  const url = (parsed.values.url ?? (env.ENVD_URL || DEFAULT_SHELL_URL)).replace(/\/+$/, '');
  if (!/^https?:\/\/[^/]/.test(url)) throw new ShellUsageError(`--url must be an http:// or https:// URL, got ${JSON.stringify(url)}`);
  return {
    url,
    token: parsed.values.token ?? (env.ENVD_TOKEN || env.ENVD_ACCESS_TOKEN || undefined),
    user: parsed.values.user,
    cwd: parsed.values.cwd,
    cmd: parsed.positionals.map(quoteForShell).join(' '),
  };
}

/** One argument as the remote login shell will read it back: unchanged when plain, else single-quoted. */
export function quoteForShell(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}
