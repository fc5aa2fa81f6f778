import { Type, type Static } from '@sinclair/typebox';

/** The longest `ready.log` pattern accepted. */
export const MAX_READY_PATTERN_LENGTH = 1_000;
/** The longest `ready.http.url` accepted. */
export const MAX_READY_URL_LENGTH = 2_048;
/** setTimeout holds at most 2^31-1 ms (schemas.ts MAX_WAIT_TIMEOUT_MS; not imported: schemas.ts imports this file). */
const MAX_WAIT_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * When a command counts as ready (issue 39): a port listening in the guest, an
 * HTTP answer, or a line of its output. One of the three, exactly.
 */
export const ReadyCheck = Type.Union(
  [
    Type.Object({ port: Type.Integer({ minimum: 1, maximum: 65_535, description: 'Ready once a TCP socket listens on this port (any address, IPv4 or IPv6)' }) }, { additionalProperties: false }),
    Type.Object(
      {
        http: Type.Object(
          {
            url: Type.String({ minLength: 1, maxLength: MAX_READY_URL_LENGTH, description: 'http:// or https:// URL, fetched with GET (redirects not followed)' }),
            status: Type.Optional(Type.Integer({ minimum: 100, maximum: 599, description: 'The status that means ready; default any 2xx or 3xx' })),
          },
          { additionalProperties: false },
        ),
      },
      { additionalProperties: false },
    ),
    Type.Object(
      { log: Type.String({ minLength: 1, maxLength: MAX_READY_PATTERN_LENGTH, description: 'A JavaScript regex, run on the linear-time engine, tested against each line of stdout and stderr as it is kept' }) },
      { additionalProperties: false },
    ),
  ],
  { title: 'ReadyCheck', description: 'When the command counts as ready: { port }, { http: { url, status? } } or { log: regex }' },
);
export type ReadyCheck = Static<typeof ReadyCheck>;

/** The fields POST /commands, /commands/stream and PUT /services take for readiness. */
export const readyFields = {
  ready: Type.Optional(ReadyCheck),
  ready_timeout_ms: Type.Optional(
    Type.Integer({ minimum: 1, maximum: MAX_WAIT_TIMEOUT_MS, description: 'A command with `ready` that is not ready this long after its start is killed (reason killed); default: no limit' }),
  ),
};

export const ReadyQuery = Type.Object(
  { timeout_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_TIMEOUT_MS, description: 'Answer 408 if the command is not ready after this long; default: wait' })) },
  { additionalProperties: false },
);

export const ReadyAnswer = Type.Object(
  { after_ms: Type.Integer({ minimum: 0, description: 'How long after its start the command became ready (0 for a command started without `ready`)' }) },
  { title: 'ReadyEvent', description: 'The command is ready' },
);
