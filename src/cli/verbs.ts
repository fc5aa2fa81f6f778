import { createReadStream, createWriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, join, posix, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { EnvdClient, type SignalName } from '../client/index.js';
import { extractArchive, hashedHere } from '../files/archive-extract.js';
import { TarBody } from '../files/tar/body.js';
import { Progress } from './progress.js';
import { SEARCH_HELP, searchVerbs } from './search-verbs.js';

/** Where a --json run's progress goes: nowhere (a stream that is no terminal). */
const NO_TTY = { isTTY: false } as NodeJS.WriteStream;

/** A mistake in the arguments: one line, exit 2. */
export class UsageError extends Error {}

interface Common {
  client: EnvdClient;
  json: boolean;
  out: (text: string) => void;
}

type Verb = (argv: string[], common: Common) => Promise<number>;

const HELP: Record<string, string> = {
  exec: 'envd exec [-i] [-t] [--user U] [--cwd DIR] [-e K=V]... -- CMD [ARG...]   run CMD, print its output, exit with its status',
  ps: 'envd ps [--all]                        list tracked commands (--all: finished ones too)',
  attach: 'envd attach PID                        replay and follow a command\'s output, exit with its status',
  logs: 'envd logs [-f] PID                     a command\'s kept stdout and stderr (-f: follow until it ends)',
  kill: 'envd kill [-s SIG] PID                 signal a command\'s group (no -s: kill the tree and forget it)',
  cat: 'envd cat PATH                          print a remote file',
  ls: 'envd ls [-d DEPTH] PATH                list a remote directory',
  cp: 'envd cp SRC DST                        copy a file or directory; a remote path is written :/path',
  watch: 'envd watch [-r] PATH                   print changes under a remote directory until interrupted',
  ...SEARCH_HELP,
};

export const VERBS = [...Object.keys(HELP), 'shell', 'completion'];

export const CLI_HELP = `envd — the daemon, and a client of one

Usage: envd VERB [--url URL] [--token T] [--json] ...   (ENVD_URL, ENVD_TOKEN)

${Object.values(HELP).map((line) => `  ${line}`).join('\n')}
  envd shell [-- CMD...]                 an interactive terminal (envd shell --help)
  envd completion bash|zsh               a completion script for the shell

envd VERB --help says more. Without a verb, envd starts the daemon (envd --help).
`;

type Values = Record<string, string | boolean | string[] | undefined>;

function parse(verb: string, argv: string[], options: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>): { values: Values; positionals: string[] } {
  try {
    return parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(`${verb}: ${(error as Error).message}`);
  }
}

function pidOf(verb: string, value: string | undefined): number {
  if (!value || !/^[1-9][0-9]{0,6}$/.test(value)) throw new UsageError(`${verb}: give a pid (a positive integer), got ${JSON.stringify(value ?? '')}`);
  return Number(value);
}

function quote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

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

/** Remote paths are written `:/path` (as scp's `host:/path` with no host). */
const remote = (path: string) => (path.startsWith(':') ? path.slice(1) : undefined);

const cp: Verb = async (argv, common) => {
  const { values, positionals } = parse('cp', argv, {});
  if (values.help || positionals.length !== 2) return help('cp', common, !values.help);
  const [src, dst] = positionals as [string, string];
  const from = remote(src);
  const to = remote(dst);
  if ((from === undefined) === (to === undefined)) throw new UsageError('cp: exactly one of SRC and DST is remote (:/path)');
  const progressTo = common.json ? NO_TTY : process.stderr;
  let files: number;
  if (from !== undefined) {
    const info = await common.client.files.info(from);
    const local = await stat(dst).catch(() => undefined);
    // Into an existing directory under the source's name, as cp does; otherwise as the name given.
    const target = local?.isDirectory() ? join(dst, posix.basename(from)) : dst;
    files = info.type === 'dir' ? await pullTree(common, from, target, progressTo) : await pullFile(common, from, target, progressTo);
  } else {
    const local = await stat(src).catch(() => undefined);
    if (!local) throw new Error(`cp: ${src}: no such file or directory`);
    const exists = await common.client.files.info(to!).catch(() => undefined);
    const target = exists?.type === 'dir' ? posix.join(to!, basename(src)) : to!;
    files = local.isDirectory() ? await pushTree(common, src, target, progressTo) : await pushFile(common, src, target, local.size, progressTo);
  }
  if (common.json) common.out(`${JSON.stringify({ files })}\n`);
  return 0;
};

/** One file down, streamed to disk and counted for the progress line. */
async function pullFile(common: Common, from: string, target: string, progressTo: NodeJS.WriteStream): Promise<number> {
  const response = await common.client.files.download(from);
  const progress = new Progress(from, Number(response.headers.get('content-length') ?? NaN) || undefined, progressTo);
  try {
    await pipeline(Readable.fromWeb(response.body as never), progress.counter(), createWriteStream(target));
  } finally {
    progress.end();
  }
  return 1;
}

/**
 * A whole tree down in one request (GET /files/archive), extracted with
 * envd's own all-or-nothing extraction: a hostile or broken archive from a
 * sandbox cannot write outside `target` or leave half a tree; an existing
 * target is merged into.
 */
async function pullTree(common: Common, from: string, target: string, progressTo: NodeJS.WriteStream): Promise<number> {
  const response = await common.client.files.downloadArchive(from);
  const progress = new Progress(from, undefined, progressTo);
  try {
    const exists = (await stat(target).catch(() => undefined)) !== undefined;
    const body = Readable.fromWeb(response.body as never).pipe(progress.counter());
    return (await extractArchive(hashedHere(body), resolve(target), exists ? 'merge' : 'create', undefined)).files;
  } finally {
    progress.end();
  }
}

/** One file up, streamed from disk: a large file never sits whole in memory. */
async function pushFile(common: Common, path: string, target: string, size: number, progressTo: NodeJS.WriteStream): Promise<number> {
  const progress = new Progress(path, size, progressTo);
  try {
    const body = Readable.toWeb(createReadStream(path, { highWaterMark: 1024 * 1024 }).pipe(progress.counter())) as unknown as ReadableStream<Uint8Array>;
    await common.client.files.upload(target, body);
  } finally {
    progress.end();
  }
  return 1;
}

/** A whole tree up in one request: written as tar while it is sent, extracted by envd all or nothing (merged into an existing target). */
async function pushTree(common: Common, path: string, target: string, progressTo: NodeJS.WriteStream): Promise<number> {
  const progress = new Progress(path, undefined, progressTo);
  try {
    const exists = await common.client.files.exists(target);
    const tar = new TarBody(path).pipe(progress.counter());
    const body = Readable.toWeb(tar) as unknown as ReadableStream<Uint8Array>;
    return (await common.client.files.uploadArchive(target, body, { mode: exists ? 'merge' : 'create' })).files;
  } finally {
    progress.end();
  }
}

const watch: Verb = async (argv, common) => {
  const { values, positionals } = parse('watch', argv, { recursive: { type: 'boolean', short: 'r' } });
  if (values.help || !positionals[0]) return help('watch', common, !values.help);
  for await (const event of common.client.files.watch({ path: positionals[0], recursive: values.recursive === true })) {
    if (common.json) common.out(`${JSON.stringify(event)}\n`);
    else if (event.event === 'change') common.out(`${event.data.type}\t${event.data.path}\n`);
  }
  return 0;
};

function help(verb: string, common: Common, wrong = false): number {
  if (wrong) throw new UsageError(`usage: ${HELP[verb]!.split('  ')[0]}`);
  common.out(`Usage: ${HELP[verb]}\n\nCommon: --url URL (ENVD_URL, default http://127.0.0.1:49983), --token T (ENVD_TOKEN), --json\n`);
  return 0;
}

export const verbs: Record<string, Verb> = { exec, ps, attach, logs, kill, cat, ls, cp, watch, ...searchVerbs };
