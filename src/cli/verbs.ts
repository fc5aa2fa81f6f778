import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { EnvdError, type CommandEvent, type SignalName } from '../client/index.js';
import { SIGNALS } from '../commands/schemas.js';
import { type Common, help, HELP, parse, pidOf, quote, UsageError, type Verb } from './args.js';
import { cp } from './cp.js';
import { portVerbs } from './ports-verbs.js';
import { searchVerbs } from './search-verbs.js';
import { snapshotVerbs } from './snapshot-verbs.js';
import { sessionVerbs } from './session-verbs.js';
import { serviceLogs, serviceVerbs } from './services-verbs.js';
import { bytesWanted, follow, type Followed } from './output.js';

export { UsageError };

export const VERBS = [...Object.keys(HELP), 'shell', 'completion'];

export const CLI_HELP = `envd — the daemon, and a client of one

Usage: envd VERB [--url URL] [--token T] [--json] ...   (ENVD_URL, ENVD_TOKEN)

${Object.values(HELP).map((line) => `  ${line}`).join('\n')}
  envd shell [-- CMD...]                 an interactive terminal (envd shell --help)
  envd completion bash|zsh               a completion script for the shell

envd VERB --help says more. Without a verb, envd starts the daemon (its options below).
`;

/** The signals `kill -s` takes: the API's, without SIG. */
const SIGNAL_NAMES = SIGNALS.map((name) => name.slice(3));

/**
 * Follows `events` until the command's exit; interrupted (Ctrl-C, SIGTERM),
 * says on stderr how to pick up where it stood, and exits 130/143.
 */
async function followResumable(verb: 'attach' | 'logs', pid: number, events: AsyncIterable<CommandEvent>, common: Common, bytes: boolean): Promise<Followed> {
  const seen: Followed = { status: undefined, last: undefined };
  const interrupted = (signal: NodeJS.Signals) => {
    const from = seen.last ? `--from ${seen.last} ` : '';
    process.stderr.write(`\nenvd ${verb}: interrupted; resume with: envd ${verb}${verb === 'logs' ? ' -f' : ''} ${from}${pid}\n`);
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  // `on`, not `once`: a second Ctrl-C while the first exits must not kill it before the hint is out.
  process.on('SIGINT', interrupted);
  process.on('SIGTERM', interrupted);
  try {
    return await follow(events, common, bytes, seen);
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
  }
}

/** The exit status a followed command ended with; a stream that ended without one is said why, on stderr. */
function statusOf(verb: string, pid: number, followed: Followed): number {
  if (followed.status !== undefined) return followed.status;
  throw new Error(`pid ${pid}: its stream ended without its exit status (envd restarted, or the command was forgotten): envd ${verb} ${pid} again, or envd ps --all`);
}

const exec: Verb = async (argv, common) => {
  const { values, positionals } = parse('exec', argv, {
    interactive: { type: 'boolean', short: 'i' },
    tty: { type: 'boolean', short: 't' },
    detach: { type: 'boolean', short: 'd' },
    user: { type: 'string', short: 'u' },
    cwd: { type: 'string', short: 'w' },
    env: { type: 'string', short: 'e', multiple: true },
    timeout: { type: 'string' },
  });
  if (values.help) return help('exec', common);
  if (positionals.length === 0) throw new UsageError('exec: give a command after --');
  if (values.detach && (values.interactive || values.tty)) throw new UsageError('exec: -d runs in the background, without -i or -t (envd attach PID follows it)');
  const envs: Record<string, string> = {};
  for (const pair of (values.env as string[] | undefined) ?? []) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new UsageError(`exec: -e wants K=V, got ${JSON.stringify(pair)}`);
    envs[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const fields = {
    cmd: positionals.map(quote).join(' '),
    ...(values.user ? { user: values.user as string } : {}),
    ...(values.cwd ? { cwd: values.cwd as string } : {}),
    ...(Object.keys(envs).length ? { envs } : {}),
    ...(values.timeout ? { timeout: Number(values.timeout) } : {}),
  };
  if (values.tty) {
    const { runShell } = await import('../shell/client.js');
    return runShell({ url: common.client.baseUrl, token: common.client.token, user: fields.user, cwd: fields.cwd, cmd: fields.cmd });
  }
  if (values.detach) {
    const { pid } = await common.client.commands.start(fields);
    common.out(common.json ? `${JSON.stringify({ pid })}\n` : `${pid}\n`);
    return 0;
  }
  const bytes = bytesWanted();
  if (!values.interactive) {
    if (common.json) {
      const result = await common.client.commands.run(fields);
      common.out(`${JSON.stringify(result)}\n`);
      return result.exit_code;
    }
    return statusOf('attach', 0, await follow(common.client.commands.stream({ ...fields, ...(bytes ? { encoding: 'base64' } : {}) }), common, bytes));
  }
  // -i: start in the background with a stdin pipe, pump local stdin into it (bytes as read), follow the output.
  const { pid } = await common.client.commands.start({ ...fields, stdin: true });
  const pump = (async () => {
    try {
      for await (const chunk of process.stdin) await common.client.commands.sendStdin(pid, chunk as Buffer);
      await common.client.commands.closeStdin(pid);
    } catch {
      // The command ended before its input did: its exit says the rest.
    }
  })();
  const followed = await follow(common.client.commands.attach(pid, { reconnect: 3, ...(bytes ? { encoding: 'base64' } : {}) }), common, bytes);
  process.stdin.destroy();
  void pump;
  await common.client.commands.wait(pid).catch(() => undefined);
  return statusOf('attach', pid, followed);
};

const ps: Verb = async (argv, common) => {
  const { values } = parse('ps', argv, { all: { type: 'boolean', short: 'a' } });
  if (values.help) return help('ps', common);
  const list = await common.client.commands.list(values.all ? { finished: true } : {});
  if (common.json) common.out(`${JSON.stringify(list)}\n`);
  else {
    common.out('PID\tSTATE\tUSER\tSTARTED\tCMD\n');
    for (const p of list) common.out(`${p.pid}\t${p.running ? 'running' : `exit ${p.exit_code ?? '?'}`}\t${p.user}\t${p.started_at}\t${[p.cmd, ...(p.args ?? []).map(quote)].join(' ')}\n`);
  }
  return 0;
};

const attach: Verb = async (argv, common) => {
  const { values, positionals } = parse('attach', argv, { from: { type: 'string' } });
  if (values.help) return help('attach', common);
  const pid = pidOf('attach', positionals[0]);
  const bytes = bytesWanted();
  const events = common.client.commands.attach(pid, { reconnect: 3, ...(values.from ? { from: values.from as string } : {}), ...(bytes ? { encoding: 'base64' } : {}) });
  return statusOf('attach', pid, await followResumable('attach', pid, events, common, bytes));
};

const logs: Verb = async (argv, common) => {
  const { values, positionals } = parse('logs', argv, { follow: { type: 'boolean', short: 'f' }, from: { type: 'string' } });
  if (values.help) return help('logs', common);
  // A name, not a pid: a service's current run (src/cli/services-verbs.ts).
  if (positionals[0] !== undefined && !/^\d+$/.test(positionals[0])) return serviceLogs(positionals[0], values, common);
  const pid = pidOf('logs', positionals[0]);
  const from = values.from as string | undefined;
  if (from !== undefined && !/^\d{1,15}-\d{1,15}$/.test(from)) throw new UsageError(`logs: --from takes an id as attach and logs print it (<stdout bytes>-<stderr bytes>), got ${JSON.stringify(from)}`);
  if (values.follow) {
    // Followed as bytes: what `logs` prints without -f is the kept bytes too.
    const events = common.client.commands.attach(pid, { reconnect: 3, encoding: 'base64', ...(from ? { from } : {}) });
    return statusOf('logs -f', pid, await followResumable('logs', pid, events, common, true));
  }
  // --from without -f: each stream's kept bytes after that position.
  const [outFrom, errFrom] = from ? from.split('-').map(Number) : [0, 0];
  const stdout = await common.client.commands.output(pid, { stream: 'stdout', ...(outFrom ? { from: outFrom } : {}) });
  const stderr = await common.client.commands.output(pid, { stream: 'stderr', ...(errFrom ? { from: errFrom } : {}) });
  if (common.json) common.out(`${JSON.stringify({ stdout: Buffer.from(stdout).toString('utf8'), stderr: Buffer.from(stderr).toString('utf8') })}\n`);
  else {
    process.stdout.write(stdout);
    process.stderr.write(stderr);
  }
  return 0;
};

const kill: Verb = async (argv, common) => {
  const { values, positionals } = parse('kill', argv, { signal: { type: 'string', short: 's' } });
  if (values.help) return help('kill', common);
  const pid = pidOf('kill', positionals[0]);
  if (values.signal) {
    const name = (values.signal as string).toUpperCase().replace(/^SIG/, '');
    if (!SIGNAL_NAMES.includes(name)) throw new UsageError(`kill: unknown signal ${JSON.stringify(values.signal)}; give one of ${SIGNAL_NAMES.join(' ')}`);
    await common.client.commands.signal(pid, `SIG${name}` as SignalName);
    if (common.json) common.out('{}\n');
    return 0;
  }
  const killed = await common.client.commands.kill(pid);
  if (common.json) common.out(`${JSON.stringify({ killed })}\n`);
  if (!killed) throw new EnvdError(404, `no command with pid ${pid} (envd ps lists them)`);
  return 0;
};

const cat: Verb = async (argv, common) => {
  const { values, positionals } = parse('cat', argv, {});
  if (values.help || !positionals[0]) return help('cat', common, !values.help);
  const response = await common.client.files.download(positionals[0]);
  await pipeline(Readable.fromWeb(response.body as never), process.stdout, { end: false });
  return 0;
};

const ls: Verb = async (argv, common) => {
  const { values, positionals } = parse('ls', argv, { depth: { type: 'string', short: 'd' } });
  if (values.help || !positionals[0]) return help('ls', common, !values.help);
  const entries = await common.client.files.list(positionals[0], values.depth ? { depth: Number(values.depth) } : {});
  if (common.json) common.out(`${JSON.stringify(entries)}\n`);
  else for (const e of entries) common.out(`${e.permissions}\t${e.owner}\t${e.group}\t${e.size}\t${e.modified_at}\t${e.path}${e.type === 'dir' ? '/' : ''}\n`);
  return 0;
};

const watch: Verb = async (argv, common) => {
  const { values, positionals } = parse('watch', argv, { recursive: { type: 'boolean', short: 'r' } });
  if (values.help || !positionals[0]) return help('watch', common, !values.help);
  for await (const event of common.client.files.watch({ path: positionals[0], recursive: values.recursive === true })) {
    if (common.json) common.out(`${JSON.stringify(event)}\n`);
    else if (event.event === 'change') common.out(`${event.data.type}\t${event.data.path}\n`);
  }
  return 0;
};

export const verbs: Record<string, Verb> = { exec, ps, attach, logs, kill, cat, ls, cp, watch, ...searchVerbs, ...snapshotVerbs, ...portVerbs, ...sessionVerbs, ...serviceVerbs };
