/**
 * Holds the sandbox's access token. Replaceable at run time (`POST /init`
 * rotates it), so everything asks the holder rather than keeping a copy.
 */
export class AccessToken {
  #token: Buffer | undefined;

  constructor(token?: string) {
    if (token) this.set(token);
  }

  get isSet(): boolean {
    return this.#token !== undefined;
  }

  set(token: string): void {
    this.#token = Buffer.from(token, 'utf8');
  }

  /**
   * Constant-time for a given token: every byte of the token is compared,
   * whatever the candidate holds or how long it is, with no early exit (the
   * same guarantee as crypto.timingSafeEqual on digests, which loaded
   * node:crypto at start only for this: 1.4 MiB of idle RSS).
   */
  matches(candidate: string): boolean {
    const token = this.#token;
    if (!token) return false;
    const given = Buffer.from(candidate, 'utf8');
    let difference = token.length ^ given.length;
    for (let i = 0; i < token.length; i++) difference |= token[i]! ^ (given[i] ?? 0);
    return difference === 0;
  }
}

/** The token of an `Authorization: Bearer <token>` header, or undefined. */
export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}
