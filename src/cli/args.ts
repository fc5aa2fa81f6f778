import { parseArgs } from 'node:util';
import type { EnvdClient } from '../client/index.js';

/** A mistake in the arguments: one line, exit 2. */
export class UsageError extends Error {}

export interface Common {
  client: EnvdClient;
  json: boolean;
  out: (text: string) => void;
}

export type Verb = (argv: string[], common: Common) => Promise<number>;

export const HELP: Record<string, string> = {
  exec: 'envd exec [-i] [-t] [-d] [--user U] [--cwd DIR] [-e K=V]... -- CMD [ARG...]   run CMD, print its output, exit with its status (-d: in the background, print its pid)',
  ps: 'envd ps [--all]                        list tracked commands (--all: finished ones too)',
  attach: "envd attach [--from ID] PID            replay and follow a command's output, exit with its status (--from: resume after the id an interrupted attach printed)",
  logs: "envd logs [-f] [--from ID] PID|SERVICE a command's (or a service's current run's) kept stdout and stderr (-f: follow until it ends, exit with its status; --from: only what follows that id)",
  services: 'envd services [NAME]                   list the services: state, pid, restarts, last exit',
  kill: "envd kill [-s SIG] PID                 signal a command's group (no -s: kill the tree and forget it)",
  cat: 'envd cat PATH                          print a remote file',
  ls: 'envd ls [-d DEPTH] PATH                list a remote directory',
  cp: 'envd cp SRC DST                        copy a file or directory; a remote path is written :/path',
  watch: 'envd watch [-r] PATH                   print changes under a remote directory until interrupted',
  grep: 'envd grep [-F] [-i|-s] [-g GLOB]... [-C N] [-m N] [--hidden] [--no-ignore] [--user U] PATTERN [PATH]   search file contents (ripgrep rules); prints path:line:text, exit 1 if nothing matched',
  snapshot: 'envd snapshot prepare [--freeze commands|all|none] [--fsfreeze] [--drop-caches] [--max-wait MS] [--thaw-after MS] | envd snapshot thaw   quiesce the sandbox before a snapshot; thaw it after one that failed',
  session: 'envd session new|run|ls|rm ...          shells whose state carries from one command to the next (envd session --help)',
  find: 'envd find [-t file|dir|any] [-n MAX] [--hidden] [--no-ignore] [--user U] GLOB [PATH]   list paths matching a glob (ripgrep rules), one per line',
  ports: 'envd ports [-w]                        list the listening TCP and bound UDP ports and who holds them (-w: then follow opens (+) and closes (-))',
};

type Values = Record<string, string | boolean | string[] | undefined>;

export function parse(verb: string, argv: string[], options: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>): { values: Values; positionals: string[] } {
  try {
    return parseArgs({ args: argv, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(`${verb}: ${(error as Error).message}`);
  }
}

export function pidOf(verb: string, value: string | undefined): number {
  if (!value || !/^[1-9][0-9]{0,6}$/.test(value)) throw new UsageError(`${verb}: give a pid (a positive integer), got ${JSON.stringify(value ?? '')}`);
  return Number(value);
}

export function quote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

export function help(verb: string, common: Common, wrong = false): number {
  if (wrong) throw new UsageError(`${verb}: usage: ${HELP[verb]!.split('  ')[0]}`);
  common.out(`Usage: ${HELP[verb]}\n\nCommon: --url URL (ENVD_URL, default http://127.0.0.1:49983), --token T (ENVD_TOKEN), --json\n`);
  return 0;
}
