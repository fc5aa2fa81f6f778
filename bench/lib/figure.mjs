// What every figure script shares: building result rows, printing its line,
// lending it an envd (the run's shared one, or its own when run alone), and
// running it alone with `node bench/<figure>.mjs [--quick]`.
import { pathToFileURL } from 'node:url';
import { closeClient, RouteMissing } from './client.mjs';
import { startEnvd } from './envd-process.mjs';
import { ratio, round } from './stats.mjs';

/**
 * One row of results. `goal` is { text, check(row) } — `check` says whether the
 * row meets it; a null goal means the figure is reported, not judged (met: null).
 * `ratio` defaults to envd/baseline.
 */
export function makeRow({ name, unit, envd, baseline = null, ratio: given, goal = null, note }) {
  const row = {
    name,
    unit,
    envd: round(envd),
    baseline: round(baseline),
    ratio: given !== undefined ? given : ratio(envd, baseline),
  };
  row.goal = goal?.text ?? 'report';
  row.met = goal === null ? null : envd == null ? false : Boolean(goal.check(row));
  if (note) row.note = note;
  return row;
}

/** The row of a figure whose envd route has not landed (or whose program is missing). */
export function missingRow({ name, unit, goal = null, baseline = null, note }) {
  return { name, unit, envd: null, baseline: round(baseline), ratio: null, goal: goal?.text ?? 'report', met: goal === null ? null : false, note };
}

/** Goal on the ratio (`atMost(1.3)`) or, with a unit, on envd's own value (`atMost(64, 'MiB')`). */
export const atMost = (limit, unit) => ({ text: unit ? `≤ ${limit} ${unit}` : `ratio ≤ ${limit}`, check: (row) => below(unit ? row.envd : row.ratio, limit) });
export const atLeast = (limit, unit) => ({ text: unit ? `≥ ${limit} ${unit}` : `ratio ≥ ${limit}`, check: (row) => below(limit, unit ? row.envd : row.ratio) });
const below = (a, b) => a != null && b != null && a <= b;

export function printRow(row) {
  const mark = row.met === null ? ' ' : row.met ? '✓' : '✗';
  const sides = row.envd == null ? `not available (${row.note ?? 'route missing'})` : `envd ${row.envd} ${row.unit}${row.baseline != null ? `, baseline ${row.baseline} ${row.unit}` : ''}`;
  const ratioText = row.ratio != null ? `, ratio ${row.ratio}` : '';
  console.log(`${mark} ${row.name}: ${sides}${ratioText}  [goal ${row.goal}]${row.envd != null && row.note ? `  (${row.note})` : ''}`);
}

/**
 * Calls `body(envd)` with the run's envd or a fresh one of its own; a route that
 * has not landed turns into the figure's missing rows instead of an error.
 */
export async function withEnvd(ctx, body, missing) {
  const own = ctx.envd ? undefined : await startEnvd();
  try {
    return await body(ctx.envd ?? own);
  } catch (error) {
    if (error instanceof RouteMissing) return missing(error.message);
    throw error;
  } finally {
    await own?.stop();
  }
}

/** `node bench/x.mjs [--quick]`: run one figure on its own and print its rows. */
export async function runIfMain(moduleUrl, run) {
  if (moduleUrl !== pathToFileURL(process.argv[1] ?? '').href) return;
  try {
    await run({ quick: process.argv.includes('--quick') });
  } finally {
    closeClient();
  }
}
