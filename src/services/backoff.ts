/** The first restart's delay. */
export const BACKOFF_FIRST_MS = 200;
/** The delay doubles up to this. */
export const BACKOFF_MAX_MS = 30_000;
/** A run that stayed up this long resets the delay to the first. */
export const BACKOFF_RESET_AFTER_MS = 60_000;

/**
 * The delay before the next start of a service whose run just ended: the
 * first one, or (a run that ended quickly again) twice the previous, capped.
 */
export function nextBackoff(previousMs: number | undefined, upForMs: number): number {
  if (previousMs === undefined || upForMs >= BACKOFF_RESET_AFTER_MS) return BACKOFF_FIRST_MS;
  return Math.min(previousMs * 2, BACKOFF_MAX_MS);
}
