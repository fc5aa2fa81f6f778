import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpError } from '../errors.js';
import type { UnixUser } from '../users.js';

/**
 * A session command's `stdin`, as a file the shell opens as the session's
 * user: created by envd in the temporary directory, exclusively and without
 * following anything (a name a user planted there fails the create, it is
 * never opened), 0600 and owned by that user, and removed once the command
 * has ended. A file rather than the shell's input: the command must see
 * exactly these bytes and then EOF, and a heredoc would add a newline.
 */
export async function writeStdinFile(text: string, user: UnixUser): Promise<string> {
  const path = join(tmpdir(), `.envd-session-stdin-${randomBytes(12).toString('hex')}`);
  const handle = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600).catch((error: unknown) => {
    throw new HttpError(507, `body/stdin: cannot write it to ${tmpdir()}: ${(error as Error).message}`, { cause: error });
  });
  try {
    if (process.getuid!() === 0) await handle.chown(user.uid, user.gid);
    await handle.writeFile(text);
  } catch (error) {
    await handle.close();
    await removeStdinFile(path);
    throw error;
  }
  await handle.close();
  return path;
}

export async function removeStdinFile(path: string): Promise<void> {
  if (path !== '') await rm(path, { force: true });
}
