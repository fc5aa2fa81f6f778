import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * Holds the sandbox's access token. Replaceable at run time (`POST /init`
 * rotates it), so everything asks the holder rather than keeping a copy.
 * Only a SHA-256 digest is kept: comparing equal-length digests makes the
 * check constant-time whatever the candidate's length.
 */
export class AccessToken {
  #digest: Buffer | undefined;

  constructor(token?: string) {
    if (token) this.set(token);
  }

  get isSet(): boolean {
    return this.#digest !== undefined;
  }

  set(token: string): void {
    this.#digest = digest(token);
  }

  matches(candidate: string): boolean {
    if (!this.#digest) return false;
    return timingSafeEqual(this.#digest, digest(candidate));
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}
