import { Type, type Static } from '@sinclair/typebox';
import { Limits } from '../cgroups/limits.js';
import { ErrorSchema } from '../errors.js';
import { CommandResult, ExitInfo, OutputEvent, StartEvent, MAX_STDIN_BYTES, MAX_TIMEOUT_SECONDS, OutputEncoding } from '../commands/schemas.js';

export const CreateSessionBody = Type.Object(
  {
    user: Type.Optional(Type.String({ minLength: 1, description: 'Unix user; default: default_user' })),
    cwd: Type.Optional(Type.String({ minLength: 1, description: "Absolute starting directory; default: default_workdir, else the user's home" })),
    envs: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Merged over the sandbox envs for this session' })),
    shell: Type.Optional(Type.Unsafe<'bash' | 'sh'>(Type.String({ enum: ['bash', 'sh'], description: 'Default: bash, else sh (as for commands)' }))),
    limits: Type.Optional(Limits),
  },
  { additionalProperties: false, title: 'CreateSessionRequest' },
);
export type CreateSessionBody = Static<typeof CreateSessionBody>;

export const SessionCreated = Type.Object(
  {
    id: Type.String(),
    pid: Type.Integer({ description: "The shell's pid (listed by GET /commands)" }),
    user: Type.String(),
    cwd: Type.String(),
    shell: Type.String({ description: 'bash or sh' }),
  },
  { title: 'SessionCreated' },
);

const sessionCommandFields = {
  cmd: Type.String({ minLength: 1, description: 'Run in the session\'s shell, whose state (cwd, variables, functions, aliases, options) carries over' }),
  timeout: Type.Optional(Type.Number({ minimum: 0, maximum: MAX_TIMEOUT_SECONDS, description: "Seconds; on expiry the command's foreground job gets SIGINT, SIGKILL 2 s later; the session lives on" })),
  stdin: Type.Optional(Type.String({ maxLength: MAX_STDIN_BYTES, description: "The command's whole stdin (then EOF); absent: empty" })),
};

export const SessionCommandBody = Type.Object(sessionCommandFields, { additionalProperties: false, title: 'SessionCommandRequest' });
export type SessionCommandBody = Static<typeof SessionCommandBody>;
export const SessionStreamBody = Type.Object({ ...sessionCommandFields, encoding: Type.Optional(OutputEncoding) }, { additionalProperties: false, title: 'SessionStreamRequest' });
export type SessionStreamBody = Static<typeof SessionStreamBody>;

const sessionEnded = { session_ended: Type.Optional(Type.Literal(true, { description: 'The command ended the shell (exit, set -e): later calls get 410' })) };
export const SessionCommandResult = Type.Composite([CommandResult, Type.Object(sessionEnded)], { title: 'SessionCommandResult', description: "One session command's result" });
export const SessionExitEvent = Type.Composite([ExitInfo, Type.Object(sessionEnded)], { title: 'SessionExitEvent' });

export const SessionParams = Type.Object({ id: Type.String({ pattern: '^[0-9a-f-]{36}$', description: 'The session id' }) });

export const SessionInfo = Type.Object(
  {
    id: Type.String(),
    pid: Type.Integer(),
    user: Type.String(),
    cwd: Type.String({ description: "The shell's current directory" }),
    shell: Type.String(),
    busy: Type.Boolean({ description: 'A command runs now' }),
    started_at: Type.String({ format: 'date-time' }),
    last_used_at: Type.String({ format: 'date-time' }),
  },
  { title: 'SessionInfo' },
);
export const SessionList = Type.Object({ sessions: Type.Array(SessionInfo) }, { title: 'SessionList' });
export const SessionEnded = Type.Object({ ended: Type.Literal(true) }, { title: 'SessionEnded' });
export const ListSessionsQuery = Type.Object({}, { additionalProperties: false });

/** The events of a session command's stream: /commands/stream's, with the session's exit. */
export const SessionEvents = { start: StartEvent, stdout: OutputEvent, stderr: OutputEvent, exit: SessionExitEvent, error: ErrorSchema };
