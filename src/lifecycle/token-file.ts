import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';

/**
 * Keeps the token file given at boot (`--access-token-file`) equal to the
 * token /init set last. Without it, an envd restarted by systemd (crash,
 * OOM, kill -9) would come back uninitialised, with /init open to anyone who
 * can reach the port until the orchestrator calls it again. The file is the
 * one the operator named (in a guest: /run/envd/token, on tmpfs), written 0600
 * through a temporary name so a crash never leaves half a token; the token is
 * written nowhere else.
 */
export class TokenFile {
  // Writes run one after another, so the file ends with the token applied last.
  #queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly path: string,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Resolves once written; a failure is logged (the token in memory still holds) and never rejects. */
  save(token: string): Promise<void> {
    const write = async () => {
      const temp = `${this.path}.${randomBytes(6).toString('hex')}.tmp`;
      try {
        await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
        await writeFile(temp, token, { mode: 0o600, flag: 'wx' });
        await rename(temp, this.path);
      } catch (error) {
        await rm(temp, { force: true });
        this.log.error({ err: error, path: this.path }, 'cannot write the token file: a restarted envd would not know the token');
      }
    };
    this.#queue = this.#queue.then(write);
    return this.#queue;
  }
}
