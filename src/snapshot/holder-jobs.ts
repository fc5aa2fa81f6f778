import { execFile } from 'node:child_process';

/**
 * Runs one of envd-holder's one-shot system jobs (src/holder/machine.h):
 * `--sync`, `--fsfreeze`, `--fsthaw`, `--add-entropy`, `--set-hostname`.
 * A child process on purpose: sync(2) and FIFREEZE may block for as long as
 * a disk takes, and envd's event loop (its /health) must not wait with them.
 * Rejects with the job's own stderr line, which names the call and errno.
 */
export type HolderJob = (args: readonly string[], stdin?: Uint8Array) => Promise<void>;

/** A job still running after this has failed (a disk that never finishes a sync). */
export const HOLDER_JOB_TIMEOUT_MS = 60_000;

export function holderJobs(holderPath: string, timeoutMs = HOLDER_JOB_TIMEOUT_MS): HolderJob {
  return (args, stdin) =>
    new Promise((resolve, reject) => {
      const child = execFile(holderPath, [...args], { timeout: timeoutMs, env: {} }, (error, _stdout, stderr) => {
        if (error) reject(new Error(String(stderr).trim() || `envd-holder ${args.join(' ')}: ${error.message}`, { cause: error }));
        else resolve();
      });
      child.stdin?.on('error', () => {}); // a job that exits early (bad arguments) closes its stdin: the exit says why
      child.stdin?.end(stdin);
    });
}
