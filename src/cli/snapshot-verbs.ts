import type { PrepareRequest, PrepareResult } from '../client/index.js';
import { type Common, help, parse, UsageError, type Verb } from './args.js';

const MiB = 1024 * 1024;
const FREEZE_MODES = ['commands', 'all', 'none'] as const;

function milliseconds(flag: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^\d{1,10}$/.test(value)) throw new UsageError(`snapshot: ${flag} takes milliseconds, a whole number, got ${JSON.stringify(value)}`);
  return Number(value);
}

/** One line a person reads; --json prints the answer as it is. */
function describePrepare(result: PrepareResult): string {
  const rss = `envd RSS ${(result.envd_rss_before / MiB).toFixed(1)} → ${(result.envd_rss_after / MiB).toFixed(1)} MiB`;
  const frozen = `${result.frozen} cgroup(s) frozen${result.unconfirmed > 0 ? `, ${result.unconfirmed} not confirmed` : ''}`;
  const filesystems = result.fs_frozen.length > 0 ? `; filesystems frozen: ${result.fs_frozen.join(' ')}` : '';
  return `${frozen}; synced in ${result.synced_ms} ms; ${(result.dropped_bytes / MiB).toFixed(1)} MiB of cache dropped; ${rss}${filesystems}; took ${result.took_ms} ms\n`;
}

/** `envd snapshot prepare|thaw`: POST /snapshot/prepare and /snapshot/thaw. */
const snapshot: Verb = async (argv, common: Common) => {
  const { values, positionals } = parse('snapshot', argv, {
    freeze: { type: 'string' },
    fsfreeze: { type: 'boolean' },
    'drop-caches': { type: 'boolean' },
    'max-wait': { type: 'string' },
    'thaw-after': { type: 'string' },
  });
  const action = positionals[0];
  if (values.help || positionals.length !== 1 || (action !== 'prepare' && action !== 'thaw')) return help('snapshot', common, !values.help);
  if (action === 'thaw') {
    const thawed = await common.client.snapshot.thaw();
    common.out(common.json ? `${JSON.stringify(thawed)}\n` : `${thawed.thawed} cgroup(s) thawed${thawed.fs_thawed.length > 0 ? `; filesystems thawed: ${thawed.fs_thawed.join(' ')}` : ''}\n`);
    return 0;
  }
  const freeze = values.freeze as string | undefined;
  if (freeze !== undefined && !(FREEZE_MODES as readonly string[]).includes(freeze)) throw new UsageError(`snapshot: --freeze takes ${FREEZE_MODES.join(', ')}, got ${JSON.stringify(freeze)}`);
  const maxWait = milliseconds('--max-wait', values['max-wait']);
  const thawAfter = milliseconds('--thaw-after', values['thaw-after']);
  const body: PrepareRequest = {
    ...(freeze !== undefined ? { freeze: freeze as PrepareRequest['freeze'] } : {}),
    ...(values.fsfreeze ? { fsfreeze: true } : {}),
    ...(values['drop-caches'] ? { drop_caches: true } : {}),
    ...(maxWait !== undefined ? { max_wait_ms: maxWait } : {}),
    ...(thawAfter !== undefined ? { thaw_after_ms: thawAfter } : {}),
  };
  const result = await common.client.snapshot.prepare(body);
  common.out(common.json ? `${JSON.stringify(result)}\n` : describePrepare(result));
  return 0;
};

export const snapshotVerbs: Record<string, Verb> = { snapshot };
