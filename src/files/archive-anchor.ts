import { existsSync } from 'node:fs';

let procFds: boolean | undefined;

/**
 * A path the kernel resolves to the open directory `fd` itself
 * (`/proc/self/fd/N`, a "magic link": no name is looked up again), so that
 * renaming the directory away and putting a symlink in its place steers
 * nothing. `fallback` where there is no /proc (envd cp on a developer's
 * macOS: no other user there to race).
 */
export function pathOfDescriptor(fd: number, fallback: string): string {
  procFds ??= existsSync('/proc/self/fd');
  return procFds ? `/proc/self/fd/${fd}` : fallback;
}
