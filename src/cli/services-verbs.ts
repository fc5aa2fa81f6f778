import { type Common, help, parse, quote, UsageError, type Verb } from './args.js';
import { bytesWanted, follow } from './output.js';

/** `envd services [NAME]`: the services and their states (one: its record). */
const services: Verb = async (argv, common) => {
  const { values, positionals } = parse('services', argv, {});
  if (values.help || positionals.length > 1) return help('services', common, !values.help);
  const list = positionals[0] !== undefined ? [await common.client.services.get(positionals[0])] : await common.client.services.list();
  if (common.json) {
    common.out(`${JSON.stringify(positionals[0] !== undefined ? list[0] : list)}\n`);
    return 0;
  }
  common.out('NAME\tSTATE\tPID\tRESTARTS\tLAST EXIT\tCMD\n');
  for (const s of list) {
    const exit = s.last_exit ? (s.last_exit.signal ?? `exit ${s.last_exit.exit_code}`) : '-';
    const state = s.error ? `${s.state} (${s.error})` : s.state;
    common.out(`${s.name}\t${state}\t${s.pid ?? '-'}\t${s.restarts}\t${exit}\t${[s.definition.cmd, ...(s.definition.args ?? []).map(quote)].join(' ')}\n`);
  }
  return 0;
};

/**
 * `envd logs SERVICE`: the current run's kept output (the pages from --from
 * on); -f follows it until the run ends. Called by `logs` when its argument is
 * a name, not a pid.
 */
export async function serviceLogs(name: string, values: { follow?: unknown; from?: unknown }, common: Common): Promise<number> {
  const from = values.from as string | undefined;
  if (from !== undefined && !/^\d{1,15}-\d{1,15}$/.test(from)) throw new UsageError(`logs: --from takes a cursor (<stdout bytes>-<stderr bytes>), got ${JSON.stringify(from)}`);
  if (values.follow) {
    const bytes = bytesWanted();
    const events = common.client.services.follow(name, { ...(from ? { from } : {}), ...(bytes ? { encoding: 'base64' } : {}) });
    const followed = await follow(events, common, bytes);
    return followed.status ?? 0;
  }
  let cursor = from;
  for (;;) {
    const page = await common.client.services.logs(name, cursor ? { from: cursor } : {});
    if (common.json) common.out(`${JSON.stringify(page)}\n`);
    else {
      process.stdout.write(page.stdout);
      process.stderr.write(page.stderr);
    }
    cursor = page.cursor;
    if (!page.more) return 0;
  }
}

export const serviceVerbs: Record<string, Verb> = { services };
