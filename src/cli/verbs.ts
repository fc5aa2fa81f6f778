import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { SignalName } from '../client/index.js';
import { type Common, help, HELP, parse, pidOf, quote, UsageError, type Verb } from './args.js';
import { cp } from './cp.js';

export { UsageError };

export const VERBS = [...Object.keys(HELP), 'shell', 'completion'];

export const CLI_HELP = `envd — the daemon, and a client of one

Usage: envd VERB [--url URL] [--token T] [--json] ...   (ENVD_URL, ENVD_TOKEN)

${Object.values(HELP).map((line) => `  ${line}`).join('\n')}
  envd shell [-- CMD...]                 an interactive terminal (envd shell --help)
  envd completion bash|zsh               a completion script for the shell

envd VERB --help says more. Without a verb, envd starts the daemon (envd --help).
`;

/** Follows a command's events to stdout/stderr and answers its exit status. */
async function print(events: AsyncIterable<import('../client/index.js').CommandEvent>, common: Common): Promise<number> {
  for await (const event of events) {
    if (common.json) common.out(`${JSON.stringify(event)}\n`);
    else if (event.event === 'stdout') process.stdout.write(event.data.data);
    else if (event.event === 'stderr') process.stderr.write(event.data.data);
    else if (event.event === 'truncated') process.stderr.write(`envd: ${event.data.bytes} bytes of ${event.data.stream} were not kept\n`);
    if (event.event === 'exit') return event.data.exit_code;
  }
  return 1;
}

const exec: Verb = async (argv, common) => {
  const { values, positionals } = parse('exec', argv, {
    interactive: { type: 'boolean', short: 'i' },
    tty: { type: 'boolean', short: 't' },
    user: { type: 'string', short: 'u' },
    cwd: { type: 'string', short: 'w' },
    env: { type: 'string', short: 'e', multiple: true },
    timeout: { type: 'string' },
  });
  if (values.help) return help('exec', common);
  if (positionals.length === 0) throw new UsageError('exec: give a command after --');
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
  if (!values.interactive) {
    if (common.json) {
      const result = await common.client.commands.run(fields);
      common.out(`${JSON.stringify(result)}\n`);
      return result.exit_code;
    }
    return print(common.client.commands.stream(fields), common);
  }
  // -i: start in the background with a stdin pipe, pump local stdin into it, follow the output.
  const { pid } = await common.client.commands.start({ ...fields, stdin: true });
  const pump = (async () => {
    try {
      for await (const chunk of process.stdin) await common.client.commands.sendStdin(pid, (chunk as Buffer).toString('utf8'));
      await common.client.commands.closeStdin(pid);
    } catch {
      // The command ended before its input did: its exit says the rest.
    }
  })();
  const status = await print(common.client.commands.attach(pid, { reconnect: 3 }), common);
  process.stdin.destroy();
  void pump;
  await common.client.commands.wait(pid).catch(() => undefined);
  return status;
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
  return print(common.client.commands.attach(pidOf('attach', positionals[0]), { reconnect: 3, ...(values.from ? { from: values.from as string } : {}) }), common);
};

const logs: Verb = async (argv, common) => {
  const { values, positionals } = parse('logs', argv, { follow: { type: 'boolean', short: 'f' } });
  if (values.help) return help('logs', common);
  const pid = pidOf('logs', positionals[0]);
  if (values.follow) {
    await print(common.client.commands.attach(pid, { reconnect: 3 }), common);
    return 0;
  }
  const stdout = await common.client.commands.output(pid, { stream: 'stdout' });
  const stderr = await common.client.commands.output(pid, { stream: 'stderr' });
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
    const name = (values.signal as string).toUpperCase();
    await common.client.commands.signal(pid, (name.startsWith('SIG') ? name : `SIG${name}`) as SignalName);
    if (common.json) common.out('{}\n');
    return 0;
  }
  const killed = await common.client.commands.kill(pid);
  if (common.json) common.out(`${JSON.stringify({ killed })}\n`);
  if (!killed) throw new Error(`no command with pid ${pid}`);
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

export const verbs: Record<string, Verb> = { exec, ps, attach, logs, kill, cat, ls, cp, watch };
