import { text } from 'node:stream/consumers';
import { type Common, parse, UsageError, type Verb } from './args.js';
import { bytesWanted, follow } from './output.js';
import type { CommandEvent } from '../client/index.js';

const USAGE = `envd session new [--user U] [--cwd DIR] [--shell bash|sh] [-e K=V]...   start a shell whose state carries over; prints its id
envd session run [--timeout S] [--stdin] ID -- CMD...   run CMD (shell text) in it, print its output, exit with its status
envd session ls                                       list live sessions
envd session rm ID                                    end a session (its jobs get SIGHUP; nohup and setsid ones live on)`;

function usage(common: Common, wrong: boolean): number {
  if (wrong) throw new UsageError(`session: usage:\n${USAGE}`);
  common.out(`Usage:\n${USAGE}\n\nCommon: --url URL (ENVD_URL, default http://127.0.0.1:49983), --token T (ENVD_TOKEN), --json\n`);
  return 0;
}

function idOf(value: string | undefined): string {
  if (!value || !/^[0-9a-f-]{36}$/.test(value)) throw new UsageError(`session: give a session id (envd session ls lists them), got ${JSON.stringify(value ?? '')}`);
  return value;
}

const create = async (argv: string[], common: Common): Promise<number> => {
  const { values, positionals } = parse('session new', argv, {
    user: { type: 'string', short: 'u' },
    cwd: { type: 'string', short: 'w' },
    shell: { type: 'string' },
    env: { type: 'string', short: 'e', multiple: true },
  });
  if (positionals.length > 0) return usage(common, true);
  const shell = values.shell as string | undefined;
  if (shell !== undefined && shell !== 'bash' && shell !== 'sh') throw new UsageError(`session new: --shell is bash or sh, got ${JSON.stringify(shell)}`);
  const envs: Record<string, string> = {};
  for (const pair of (values.env as string[] | undefined) ?? []) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new UsageError(`session new: -e wants K=V, got ${JSON.stringify(pair)}`);
    envs[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const session = await common.client.sessions.create({
    ...(values.user ? { user: values.user as string } : {}),
    ...(values.cwd ? { cwd: values.cwd as string } : {}),
    ...(shell ? { shell } : {}),
    ...(Object.keys(envs).length ? { envs } : {}),
  });
  common.out(common.json ? `${JSON.stringify(session.created)}\n` : `${session.id}\n`);
  return 0;
};

const run = async (argv: string[], common: Common): Promise<number> => {
  const { values, positionals } = parse('session run', argv, { timeout: { type: 'string' }, stdin: { type: 'boolean' } });
  const id = idOf(positionals[0]);
  // Shell text, as typed at a prompt: the words are joined, not quoted.
  const cmd = positionals.slice(1).join(' ');
  if (cmd === '') throw new UsageError('session run: give a command after the id (envd session run ID -- CMD...)');
  const timeout = values.timeout === undefined ? undefined : Number(values.timeout);
  if (timeout !== undefined && !(timeout >= 0)) throw new UsageError(`session run: --timeout takes seconds, got ${JSON.stringify(values.timeout)}`);
  const stdin = values.stdin ? await text(process.stdin) : undefined;
  const session = common.client.sessions.get(id);
  const bytes = bytesWanted();
  const options = { ...(timeout !== undefined ? { timeout } : {}), ...(stdin !== undefined ? { stdin } : {}) };
  if (common.json) {
    const result = await session.run(cmd, options);
    common.out(`${JSON.stringify(result)}\n`);
    return result.exit_code;
  }
  // A session's events are a command stream's (exit adds session_ended): the same printer follows them.
  const events = session.stream(cmd, { ...options, ...(bytes ? { encoding: 'base64' as const } : {}) }) as AsyncIterable<CommandEvent>;
  const followed = await follow(events, common, bytes);
  if (followed.status === undefined) throw new Error(`session ${id}: the stream ended without the command's exit status (envd restarted?): envd session ls`);
  return followed.status;
};

const list = async (argv: string[], common: Common): Promise<number> => {
  const { positionals } = parse('session ls', argv, {});
  if (positionals.length > 0) return usage(common, true);
  const sessions = await common.client.sessions.list();
  if (common.json) common.out(`${JSON.stringify(sessions)}\n`);
  else {
    common.out('ID\tPID\tSTATE\tUSER\tSHELL\tLAST USED\tCWD\n');
    for (const s of sessions) common.out(`${s.id}\t${s.pid}\t${s.busy ? 'busy' : 'idle'}\t${s.user}\t${s.shell}\t${s.last_used_at}\t${s.cwd}\n`);
  }
  return 0;
};

const remove = async (argv: string[], common: Common): Promise<number> => {
  const { positionals } = parse('session rm', argv, {});
  await common.client.sessions.get(idOf(positionals[0])).end();
  if (common.json) common.out('{"ended":true}\n');
  return 0;
};

const SUBVERBS: Record<string, (argv: string[], common: Common) => Promise<number>> = { new: create, run, ls: list, rm: remove };

/** `envd session new|run|ls|rm`. */
const session: Verb = async (argv, common) => {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '--help' || sub === '-h') return usage(common, sub === undefined);
  const verb = SUBVERBS[sub];
  if (!verb) throw new UsageError(`session: unknown subcommand ${JSON.stringify(sub)}; give one of ${Object.keys(SUBVERBS).join(', ')}`);
  if (rest.includes('--help') || rest.includes('-h')) return usage(common, false);
  return verb(rest, common);
};

export const sessionVerbs: Record<string, Verb> = { session };
