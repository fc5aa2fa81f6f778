import { readFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { parseArgs } from 'node:util';
import { MEMORY_BUDGET_BYTES } from './memory-budget.js';
import { checkForwardAddresses } from './ports/forward-addresses.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export const DEFAULT_PORT = 49983;
export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024;
export const DEFAULT_OUTPUT_MEMORY_BYTES = 32 * 1024 * 1024;
/** The smallest --client-memory-bytes: each part of the budget, scaled, still holds its largest reservation. */
export const MIN_CLIENT_MEMORY_BYTES = MEMORY_BUDGET_BYTES / 2;
export const DEFAULT_MAX_SPOOL_BYTES = 1024 * 1024 * 1024;
/** How long a finished command's exit and kept output stay readable (seconds). */
export const DEFAULT_KEEP_FINISHED_SECONDS = 600;
/**
 * How long a collected command (its result handed out: wait answered, its
 * foreground request or stream over) stays readable (seconds). 0: the spec's
 * "the process is then removed from the tracked list".
 */
export const DEFAULT_KEEP_COLLECTED_SECONDS = 0;
/** What all commands together leave to envd: its idle RSS (~60 MiB) and its 64 MiB budget above it. */
export const DEFAULT_RESERVE_MEMORY_BYTES = 128 * 1024 * 1024;
/** Where a template declares its services (issue 39). */
export const DEFAULT_SERVICES_DIR = '/etc/envd/services';

/** The longest --keep-finished and --keep-collected: a week, and within what a Node timer holds. */
export const MAX_KEEP_FINISHED_SECONDS = 7 * 24 * 3600;

/**
 * Where envd keeps what must outlive it: the state dir on tmpfs (survives a
 * restart of envd, not a reboot), the spool on a disk file system (never tmpfs
 * by default: spooled output must not take the memory the budget protects).
 * Root gets the system places; anyone else a per-user place.
 */
export function defaultDirs(uid: number, env: NodeJS.ProcessEnv): { stateDir: string; spoolDir: string } {
  if (uid === 0) return { stateDir: '/run/envd', spoolDir: '/var/lib/envd/spool' };
  const runtime = env.XDG_RUNTIME_DIR && isAbsolute(env.XDG_RUNTIME_DIR) ? env.XDG_RUNTIME_DIR : join(tmpdir(), `envd-${uid}`);
  const cache = env.XDG_CACHE_HOME && isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : join(homedir(), '.cache');
  return { stateDir: join(runtime, 'envd'), spoolDir: join(cache, 'envd', 'spool') };
}

export interface Config {
  readonly host: string;
  readonly port: number;
  readonly accessToken: string | undefined;
  /** Where the token lives across envd restarts: read at start, rewritten by /init. */
  readonly accessTokenFile: string | undefined;
  readonly defaultUser: string | undefined;
  readonly defaultWorkdir: string | undefined;
  readonly maxOutputBytes: number;
  /** All kept output of all commands held in memory (the state dir's tmpfs), together. */
  readonly outputMemoryBytes: number;
  /** What envd may hold for clients at once (src/memory-budget.ts), split in its proportions. */
  readonly clientMemoryBytes: number;
  /** Kept output past the memory budget goes here, on disk. */
  readonly spoolDir: string;
  /** All spooled output together; past it output is dropped and marked truncated. */
  readonly maxSpoolBytes: number;
  /** What a restarted envd needs to re-adopt its commands (tmpfs: survives a restart, not a reboot). */
  readonly stateDir: string;
  /** A lone stream client's socket is lent to the command's holder, which writes the output to it itself. */
  readonly directOutput: boolean;
  /** How long a finished command nobody has collected stays readable (exit, kept output, resumable streams) before it is freed. */
  readonly keepFinishedMs: number;
  /** How long a collected command stays readable after its collection; 0 forgets it at once. */
  readonly keepCollectedMs: number;
  /** Sessions idle this long are ended; 0: never (docs/api.md, Sessions). */
  readonly sessionIdleTimeoutMs: number;
  /** Memory kept from all commands together for envd (cgroup mode): they get at most MemTotal less this. */
  readonly reserveMemoryBytes: number;
  /** Per-command cgroups where the host allows them (auto), or never (off: proc mode, e.g. a template that manages cgroups itself). */
  readonly commandCgroups: 'auto' | 'off';
  /** The image's entrypoint to start once per boot (rootfs/image-to-template.mjs --entrypoint writes it). */
  readonly entrypointFile: string | undefined;
  /** Loopback-only TCP listeners are made reachable on the guest's other addresses (src/ports/loopback-forward.ts). */
  readonly forwardLoopback: boolean;
  /** Where they are made reachable: these addresses, or (undefined) every non-loopback address of the guest. */
  readonly forwardAddresses: readonly string[] | undefined;
  /** Forwarded TCP connections are steered into the listener in the kernel where BPF allows (src/holder/steer.h); off: always relayed. */
  readonly forwardSteering: boolean;
  /** The template's services (NAME.json each), started once per boot in dependency order. */
  readonly servicesDir: string;
  readonly logLevel: LogLevel;
}

/** Thrown with every problem found at once, so one run of envd shows them all. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
  }
}

export const HELP = `envd — the daemon inside a sandbox VM

Usage: envd [options]
       envd shell [--url URL] [--token T] [--user U] [--cwd DIR] [-- CMD...]   (see envd shell --help)

Options (each also read from the environment variable shown):
  --host <addr>               ENVD_HOST               listen address (default 0.0.0.0)
  --port <n>                  ENVD_PORT               listen port (default ${DEFAULT_PORT})
  --access-token-file <path>  ENVD_ACCESS_TOKEN_FILE  file holding the access token; if absent, envd starts
                                                      uninitialised and POST /init writes it (0600)
                              ENVD_ACCESS_TOKEN       the token itself; removed from envd's environment once read
  --default-user <name>       ENVD_DEFAULT_USER       Unix user for commands and files (default: the user envd runs as)
  --default-workdir <path>    ENVD_DEFAULT_WORKDIR    working directory for commands (default: the user's home)
  --max-output-bytes <n>      ENVD_MAX_OUTPUT_BYTES   output kept per stream per command (default ${DEFAULT_MAX_OUTPUT_BYTES})
  --output-memory-bytes <n>   ENVD_OUTPUT_MEMORY_BYTES  kept output of all commands held in memory (default ${DEFAULT_OUTPUT_MEMORY_BYTES})
  --client-memory-bytes <n>   ENVD_CLIENT_MEMORY_BYTES  what envd holds for clients at once: streams, transfers, archives,
                                                      watches; past it new work waits, then 503 (default ${MEMORY_BUDGET_BYTES})
  --spool-dir <path>          ENVD_SPOOL_DIR          kept output past the memory budget, on disk
                                                      (default /var/lib/envd/spool as root, else ~/.cache/envd/spool)
  --max-spool-bytes <n>       ENVD_MAX_SPOOL_BYTES    all spooled output together (default ${DEFAULT_MAX_SPOOL_BYTES})
  --state-dir <path>          ENVD_STATE_DIR          what a restarted envd re-adopts its commands from
                                                      (default /run/envd as root, else $XDG_RUNTIME_DIR/envd)
  --direct-output <on|off>    ENVD_DIRECT_OUTPUT      a lone stream client gets the output from the holder
                                                      directly, not through envd (default on)
  --keep-finished <seconds>   ENVD_KEEP_FINISHED      how long a finished command nobody has collected (waited for)
                                                      stays readable (default ${DEFAULT_KEEP_FINISHED_SECONDS}; 0: until collected)
  --keep-collected <seconds>  ENVD_KEEP_COLLECTED     how long a collected command stays readable after its result
  --session-idle-timeout <s>  ENVD_SESSION_IDLE_TIMEOUT  end sessions idle this long (default 0: never)
                                                      was handed out (default ${DEFAULT_KEEP_COLLECTED_SECONDS}: forgotten at once)
  --reserve-memory <bytes>    ENVD_RESERVE_MEMORY     memory all commands together leave to envd (cgroup mode: they get at most
                                                      MemTotal less this; default ${DEFAULT_RESERVE_MEMORY_BYTES})
  --command-cgroups <auto|off> ENVD_COMMAND_CGROUPS  a cgroup per command where cgroup v2 is writable (auto), or
                                                      none: process groups only, no limits (off; default auto)
  --entrypoint-file <path>    ENVD_ENTRYPOINT_FILE    the image's entrypoint ({"args","user","cwd","envs"}), started once
                                                      per boot as a tracked background command
  --forward-loopback <on|off> ENVD_FORWARD_LOOPBACK  a TCP listener bound only to 127.0.0.1 or ::1 is made reachable
                                                      on the guest's other addresses, same port (default on)
  --forward-address <addr>    ENVD_FORWARD_ADDRESS    where (repeatable; the variable comma-separated; default every
                                                      non-loopback address of the guest)
  --forward-steering <on|off> ENVD_FORWARD_STEERING  TCP connections go straight to the listener by a BPF sk_lookup
                                                      program where the kernel allows (on, default), or always through
                                                      envd's relay (off)
  --services-dir <path>       ENVD_SERVICES_DIR       the template's services, NAME.json each (the body of PUT /services/NAME),
                                                      started once per boot in dependency order (default /etc/envd/services)
  --log-level <level>         ENVD_LOG_LEVEL          ${LOG_LEVELS.join('|')} (default info)
  --help                      print this help and exit
  --version                   print the version and exit
`;

const OPTIONS = {
  host: { type: 'string', env: 'ENVD_HOST' },
  port: { type: 'string', env: 'ENVD_PORT' },
  'access-token-file': { type: 'string', env: 'ENVD_ACCESS_TOKEN_FILE' },
  'default-user': { type: 'string', env: 'ENVD_DEFAULT_USER' },
  'default-workdir': { type: 'string', env: 'ENVD_DEFAULT_WORKDIR' },
  'max-output-bytes': { type: 'string', env: 'ENVD_MAX_OUTPUT_BYTES' },
  'output-memory-bytes': { type: 'string', env: 'ENVD_OUTPUT_MEMORY_BYTES' },
  'client-memory-bytes': { type: 'string', env: 'ENVD_CLIENT_MEMORY_BYTES' },
  'spool-dir': { type: 'string', env: 'ENVD_SPOOL_DIR' },
  'max-spool-bytes': { type: 'string', env: 'ENVD_MAX_SPOOL_BYTES' },
  'state-dir': { type: 'string', env: 'ENVD_STATE_DIR' },
  'direct-output': { type: 'string', env: 'ENVD_DIRECT_OUTPUT' },
  'keep-finished': { type: 'string', env: 'ENVD_KEEP_FINISHED' },
  'keep-collected': { type: 'string', env: 'ENVD_KEEP_COLLECTED' },
  'session-idle-timeout': { type: 'string', env: 'ENVD_SESSION_IDLE_TIMEOUT' },
  'entrypoint-file': { type: 'string', env: 'ENVD_ENTRYPOINT_FILE' },
  'services-dir': { type: 'string', env: 'ENVD_SERVICES_DIR' },
  'reserve-memory': { type: 'string', env: 'ENVD_RESERVE_MEMORY' },
  'command-cgroups': { type: 'string', env: 'ENVD_COMMAND_CGROUPS' },
  'forward-loopback': { type: 'string', env: 'ENVD_FORWARD_LOOPBACK' },
  'forward-address': { type: 'string', env: 'ENVD_FORWARD_ADDRESS', multiple: true },
  'forward-steering': { type: 'string', env: 'ENVD_FORWARD_STEERING' },
  'log-level': { type: 'string', env: 'ENVD_LOG_LEVEL' },
  help: { type: 'boolean' },
  version: { type: 'boolean' },
} as const;

export type CliAction = { kind: 'help' } | { kind: 'version' } | { kind: 'run'; config: Config };

/** Reads flags, then the environment, into one frozen Config. Flags win over the environment. */
export function parseCli(argv: string[], env: NodeJS.ProcessEnv): CliAction {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new ConfigError([(error as Error).message]);
  }
  if (values.help) return { kind: 'help' };
  if (values.version) return { kind: 'version' };

  const problems: string[] = [];
  const read = (name: Exclude<keyof typeof OPTIONS, 'help' | 'version' | 'forward-address'>): string | undefined => {
    const flag = values[name];
    if (typeof flag === 'string') return flag;
    const fromEnv = env[OPTIONS[name].env];
    return fromEnv === undefined || fromEnv === '' ? undefined : fromEnv;
  };
  const describe = (name: keyof typeof OPTIONS) =>
    'env' in OPTIONS[name] ? `--${name} (${OPTIONS[name].env})` : `--${name}`;

  const port = parseInteger(read('port') ?? String(DEFAULT_PORT), 0, 65535);
  if (port === undefined) problems.push(`${describe('port')} must be an integer from 0 to 65535, got ${JSON.stringify(read('port'))}`);

  const maxOutput = parseInteger(read('max-output-bytes') ?? String(DEFAULT_MAX_OUTPUT_BYTES), 1, Number.MAX_SAFE_INTEGER);
  if (maxOutput === undefined) problems.push(`${describe('max-output-bytes')} must be a positive integer, got ${JSON.stringify(read('max-output-bytes'))}`);

  const byteOption = (name: 'output-memory-bytes' | 'max-spool-bytes' | 'client-memory-bytes', fallback: number, min: number) => {
    const value = parseInteger(read(name) ?? String(fallback), min, Number.MAX_SAFE_INTEGER);
    if (value === undefined) problems.push(`${describe(name)} must be an integer of at least ${min}, got ${JSON.stringify(read(name))}`);
    return value;
  };
  // 0 is allowed: no memory tier (everything kept goes to the spool), or no spool (kept output stops at the memory budget).
  const outputMemory = byteOption('output-memory-bytes', DEFAULT_OUTPUT_MEMORY_BYTES, 0);
  const maxSpool = byteOption('max-spool-bytes', DEFAULT_MAX_SPOOL_BYTES, 0);
  // At least half the default: every part must still hold the largest piece of work it takes (an archive upload's 4 MiB).
  const clientMemory = byteOption('client-memory-bytes', MEMORY_BUDGET_BYTES, MIN_CLIENT_MEMORY_BYTES);
  const dirs = defaultDirs(process.getuid?.() ?? 0, env);
  const dirOption = (name: 'spool-dir' | 'state-dir', fallback: string) => {
    const value = read(name) ?? fallback;
    if (!isAbsolute(value)) problems.push(`${describe(name)} must be an absolute path, got ${JSON.stringify(value)}`);
    return value;
  };
  const spoolDir = dirOption('spool-dir', dirs.spoolDir);
  const stateDir = dirOption('state-dir', dirs.stateDir);

  const logLevel = read('log-level') ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) problems.push(`${describe('log-level')} must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(logLevel)}`);

  const directOutput = read('direct-output') ?? 'on';
  if (directOutput !== 'on' && directOutput !== 'off') problems.push(`${describe('direct-output')} must be on or off, got ${JSON.stringify(directOutput)}`);

  const keepFinished = parseInteger(read('keep-finished') ?? String(DEFAULT_KEEP_FINISHED_SECONDS), 0, MAX_KEEP_FINISHED_SECONDS);
  if (keepFinished === undefined) problems.push(`${describe('keep-finished')} must be a number of seconds from 0 to ${MAX_KEEP_FINISHED_SECONDS}, got ${JSON.stringify(read('keep-finished'))}`);

  const keepCollected = parseInteger(read('keep-collected') ?? String(DEFAULT_KEEP_COLLECTED_SECONDS), 0, MAX_KEEP_FINISHED_SECONDS);
  if (keepCollected === undefined) problems.push(`${describe('keep-collected')} must be a number of seconds from 0 to ${MAX_KEEP_FINISHED_SECONDS}, got ${JSON.stringify(read('keep-collected'))}`);
  const sessionIdle = parseInteger(read('session-idle-timeout') ?? '0', 0, MAX_KEEP_FINISHED_SECONDS);
  if (sessionIdle === undefined) problems.push(`${describe('session-idle-timeout')} must be a number of seconds from 0 to ${MAX_KEEP_FINISHED_SECONDS}, got ${JSON.stringify(read('session-idle-timeout'))}`);

  const commandCgroups = read('command-cgroups') ?? 'auto';
  if (commandCgroups !== 'auto' && commandCgroups !== 'off') problems.push(`${describe('command-cgroups')} must be auto or off, got ${JSON.stringify(commandCgroups)}`);
  const reserveMemory = parseInteger(read('reserve-memory') ?? String(DEFAULT_RESERVE_MEMORY_BYTES), 0, 2 ** 40);
  if (reserveMemory === undefined) problems.push(`${describe('reserve-memory')} must be a number of bytes from 0 to ${2 ** 40}, got ${JSON.stringify(read('reserve-memory'))}`);

  const entrypointFile = read('entrypoint-file');
  if (entrypointFile !== undefined && !isAbsolute(entrypointFile)) problems.push(`${describe('entrypoint-file')} must be an absolute path, got ${JSON.stringify(entrypointFile)}`);

  const forwardLoopback = read('forward-loopback') ?? 'on';
  if (forwardLoopback !== 'on' && forwardLoopback !== 'off') problems.push(`${describe('forward-loopback')} must be on or off, got ${JSON.stringify(forwardLoopback)}`);
  const forwardSteering = read('forward-steering') ?? 'on';
  if (forwardSteering !== 'on' && forwardSteering !== 'off') problems.push(`${describe('forward-steering')} must be on or off, got ${JSON.stringify(forwardSteering)}`);
  const forwardFlags = values['forward-address'] as string[] | undefined;
  const forwardEnv = env.ENVD_FORWARD_ADDRESS?.split(',').map((address) => address.trim()).filter(Boolean);
  const forwardAddresses = forwardFlags ?? (forwardEnv && forwardEnv.length > 0 ? forwardEnv : undefined);
  problems.push(...checkForwardAddresses(forwardAddresses ?? []));
  const servicesDir = read('services-dir') ?? DEFAULT_SERVICES_DIR;
  if (!isAbsolute(servicesDir)) problems.push(`${describe('services-dir')} must be an absolute path, got ${JSON.stringify(servicesDir)}`);

  const host = read('host') ?? '0.0.0.0';
  if (host.trim() === '') problems.push(`${describe('host')} must not be empty`);

  const workdir = read('default-workdir');
  if (workdir !== undefined && !isAbsolute(workdir)) problems.push(`${describe('default-workdir')} must be an absolute path, got ${JSON.stringify(workdir)}`);

  let accessToken: string | undefined;
  const tokenFile = read('access-token-file');
  if (tokenFile !== undefined) {
    if (!isAbsolute(tokenFile)) problems.push(`${describe('access-token-file')} must be an absolute path, got ${JSON.stringify(tokenFile)}`);
    try {
      accessToken = readFileSync(tokenFile, 'utf8').trim();
      if (accessToken === '') problems.push(`${describe('access-token-file')} ${tokenFile} is empty`);
    } catch (error) {
      // Not there yet: envd starts uninitialised and /init will write it (see lifecycle/token-file.ts).
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') problems.push(`${describe('access-token-file')} cannot be read: ${code ?? (error as Error).message}`);
    }
  } else if (env.ENVD_ACCESS_TOKEN) {
    accessToken = env.ENVD_ACCESS_TOKEN;
  }

  if (problems.length > 0) throw new ConfigError(problems);
  return {
    kind: 'run',
    config: Object.freeze({
      host,
      port: port!,
      accessToken,
      accessTokenFile: tokenFile,
      defaultUser: read('default-user'),
      defaultWorkdir: workdir,
      maxOutputBytes: maxOutput!,
      outputMemoryBytes: outputMemory!,
      clientMemoryBytes: clientMemory!,
      spoolDir,
      maxSpoolBytes: maxSpool!,
      stateDir,
      directOutput: directOutput === 'on',
      keepFinishedMs: keepFinished! * 1000,
      keepCollectedMs: keepCollected! * 1000,
      sessionIdleTimeoutMs: sessionIdle! * 1000,
      entrypointFile,
      servicesDir,
      reserveMemoryBytes: reserveMemory!,
      commandCgroups: commandCgroups as 'auto' | 'off',
      forwardLoopback: forwardLoopback === 'on',
      forwardAddresses: forwardAddresses && Object.freeze([...forwardAddresses]),
      forwardSteering: forwardSteering === 'on',
      logLevel: logLevel as LogLevel,
    }),
  };
}

function parseInteger(text: string, min: number, max: number): number | undefined {
  if (!/^\d+$/.test(text)) return undefined;
  const value = Number(text);
  return Number.isSafeInteger(value) && value >= min && value <= max ? value : undefined;
}
