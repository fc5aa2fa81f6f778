import { Type, type Static } from '@sinclair/typebox';
import { Limits } from '../cgroups/limits.js';
import { ErrorSchema } from '../errors.js';
import { ReadyAnswer, readyFields } from './ready-schemas.js';

/** setTimeout holds at most 2^31-1 ms; a longer timeout would fire at once, so it is refused instead. */
export const MAX_TIMEOUT_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

export const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGKILL', 'SIGUSR1', 'SIGUSR2', 'SIGSTOP', 'SIGCONT'] as const;


/** Terminal sizes accepted in `pty` and by resize. */
export const MAX_PTY_DIMENSION = 1000;

const dimension = (description: string) => Type.Integer({ minimum: 1, maximum: MAX_PTY_DIMENSION, description });
const ptySize = (description: string) => Type.Object({ cols: dimension('Columns'), rows: dimension('Rows') }, { additionalProperties: false, title: 'PtySize', description });

const commandFields = {
  // Optional in the schema because a pty command may omit it; without pty, spawn.ts requires it (400 naming body/cmd).
  cmd: Type.Optional(
    Type.String({
      description:
        'Run as `bash -l -c <cmd>` (else `sh -l -c`, else the user\'s shell); with `args`, the program run with them and no shell (looked up in PATH). Required unless `pty` is given, where absent or empty runs the user\'s interactive login shell',
    }),
  ),
  args: Type.Optional(Type.Array(Type.String(), { description: 'Arguments of `cmd` run as a program, with no shell (an image may have none)' })),
  pty: Type.Optional(ptySize('Run on a pseudo-terminal of this size: stdin, stdout and stderr are the terminal')),
  cwd: Type.Optional(Type.String({ minLength: 1, description: 'Absolute working directory; default: default_workdir, else the user\'s home' })),
  envs: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Merged over the sandbox envs for this command only' })),
  timeout: Type.Optional(Type.Number({ minimum: 0, maximum: MAX_TIMEOUT_SECONDS, description: 'Seconds; 0 or absent means none. On expiry the whole tree gets SIGKILL' })),
  user: Type.Optional(Type.String({ minLength: 1, description: 'Unix user; default: default_user' })),
  limits: Type.Optional(Limits),
  ...readyFields,
};

/** Why a command ended (docs/api.md, "Why it ended"). */
export const REASONS = ['exited', 'signaled', 'killed', 'timed_out', 'oom_killed', 'pids_exhausted'] as const;
export type Reason = (typeof REASONS)[number];
const Reason = Type.Unsafe<Reason>(
  Type.String({
    enum: [...REASONS],
    description: 'exited (on its own), signaled (by a signal nobody asked envd for), killed (a request: DELETE, a client gone), timed_out, oom_killed (memory.events oom_kill), pids_exhausted (pids.events max)',
  }),
);

export const StartBody = Type.Object(
  {
    ...commandFields,
    background: Type.Optional(Type.Boolean({ default: false, description: 'true answers { pid } at once' })),
    stdin: Type.Optional(Type.Boolean({ default: false, description: 'Reserve a stdin pipe; otherwise stdin is /dev/null' })),
  },
  { additionalProperties: false, title: 'RunCommandRequest' },
);
export type StartBody = Static<typeof StartBody>;

/** How output events carry the output: text (UTF-8, invalid bytes replaced) or each chunk's raw bytes in base64. */
export const OutputEncoding = Type.Unsafe<'utf8' | 'base64'>(
  Type.String({ enum: ['utf8', 'base64'], default: 'utf8', description: 'utf8: output events carry text (invalid UTF-8 replaced by U+FFFD); base64: each chunk\'s raw bytes, base64-encoded (byte-exact)' }),
);

export const StreamBody = Type.Object({ ...commandFields, encoding: Type.Optional(OutputEncoding) }, { additionalProperties: false, title: 'StreamCommandRequest' });
export type StreamBody = Static<typeof StreamBody>;

export const CommandResult = Type.Object(
  {
  stdout: Type.String(),
  stderr: Type.String(),
  exit_code: Type.Integer({ description: '124 on timeout; 128 + n when signal n ended the shell' }),
  reason: Reason,
  timed_out: Type.Optional(Type.Literal(true)),
  signal: Type.Optional(Type.String({ description: 'The signal that ended the shell, e.g. "SIGKILL"' })),
  stdout_truncated: Type.Optional(Type.Literal(true)),
  stderr_truncated: Type.Optional(Type.Literal(true)),
  },
  { title: 'CommandResult', description: "A finished command's result" },
);
export type CommandResult = Static<typeof CommandResult>;

/** How a command ended: the `exit` event, and the non-output part of a CommandResult. */
export const ExitInfo = Type.Object(
  {
    exit_code: Type.Integer(),
    reason: Reason,
    timed_out: Type.Optional(Type.Literal(true)),
    signal: Type.Optional(Type.String()),
  },
  { title: 'ExitEvent', description: 'How the command ended: the last event of a stream' },
);
export type ExitInfo = Static<typeof ExitInfo>;

export const BackgroundStarted = Type.Object({ pid: Type.Integer() }, { title: 'BackgroundStarted', description: 'A background command started' });

export const CommandStats = Type.Object(
  {
    cpu_usec: Type.Integer({ description: 'CPU time of the whole tree (cpu.stat usage_usec)' }),
    memory_bytes: Type.Integer({ description: 'memory.current' }),
    memory_peak_bytes: Type.Union([Type.Integer(), Type.Null()], { description: 'memory.peak (null before kernel 5.19)' }),
    pids: Type.Integer({ description: 'pids.current: processes and threads now' }),
  },
  { title: 'CommandStats', description: "What the command's cgroup has used (cgroup mode only)" },
);

export const ProcessInfo = Type.Object(
  {
  pid: Type.Integer(),
  cmd: Type.String(),
  args: Type.Optional(Type.Array(Type.String(), { description: 'The arguments of a command run without a shell' })),
  cwd: Type.String(),
  user: Type.String(),
  background: Type.Boolean(),
  stdin: Type.Boolean({ description: 'Whether a stdin pipe was reserved' }),
  started_at: Type.String({ format: 'date-time' }),
  running: Type.Boolean(),
  exit_code: Type.Optional(Type.Integer()),
  reason: Type.Optional(Reason),
  ended_at: Type.Optional(Type.String({ format: 'date-time', description: 'When a finished command ended' })),
  pty: Type.Optional(ptySize('The terminal\'s current size, for commands on a pty')),
  limits: Type.Optional(Limits),
  stats: Type.Optional(CommandStats),
  },
  { title: 'ProcessInfo', description: 'A tracked command' },
);
export type ProcessInfo = Static<typeof ProcessInfo>;

export const ListQuery = Type.Object(
  { finished: Type.Optional(Type.Boolean({ description: 'Also list finished commands whose result was collected (kept for --keep-collected, 0 by default)' })) },
  { additionalProperties: false },
);

export const AttachQuery = Type.Object(
  {
    from: Type.Optional(Type.String({ description: 'Resume after this event id (<stdout bytes>-<stderr bytes>); the Last-Event-ID header does the same' })),
    encoding: Type.Optional(OutputEncoding),
  },
  { additionalProperties: false },
);

/** setTimeout holds at most 2^31-1 ms. */
export const MAX_WAIT_TIMEOUT_MS = 2 ** 31 - 1;
export const WaitQuery = Type.Object(
  { timeout_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_TIMEOUT_MS, description: 'Answer 408 if the command still runs after this long' })) },
  { additionalProperties: false },
);

export const OutputQuery = Type.Object(
  {
    stream: Type.Optional(Type.Unsafe<'stdout' | 'stderr'>(Type.String({ enum: ['stdout', 'stderr'], description: 'stdout (the default) or stderr' }))),
    from: Type.Optional(Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'The first byte (of the kept stream) to read' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER, description: 'At most this many bytes' })),
  },
  { additionalProperties: false },
);

export const RawBytes = Type.Unknown({ description: 'the kept bytes of the stream, application/octet-stream' });

export const ProcessList = Type.Object({ processes: Type.Array(ProcessInfo) }, { title: 'ProcessList' });

// A string pattern, not Type.Integer: path params are coerced, and the coercion
// would turn "0x10" into 16 and "1e99" into a huge "integer". Linux pids have
// at most 7 digits (pid_max <= 2^22).
export const PidParams = Type.Object({
  pid: Type.String({ pattern: '^[1-9][0-9]{0,6}$', description: 'The shell\'s OS pid, a decimal integer' }),
});

// A plain enum rather than a union of literals, so a bad value gets one clear
// message ("must be equal to one of the allowed values") instead of anyOf noise.
export type SignalName = (typeof SIGNALS)[number];
const SignalName = Type.Unsafe<SignalName>(Type.String({ enum: [...SIGNALS] }));
export const SignalBody = Type.Object({ signal: SignalName }, { additionalProperties: false, title: 'SignalRequest' });
export type SignalBody = Static<typeof SignalBody>;

/** The most one POST .../stdin takes (JSON or raw): the app's JSON body limit, so both ways agree. */
export const MAX_STDIN_BYTES = 10 * 1024 * 1024;
export const StdinBody = Type.Object(
  {
    data: Type.Optional(Type.String({ description: 'Text, written as UTF-8' })),
    data_base64: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9+/]*={0,2}$', description: 'Raw bytes, base64-encoded (binary stdin)' })),
  },
  { additionalProperties: false, title: 'StdinRequest', description: 'Exactly one of data and data_base64; or send the bytes as the body with content-type application/octet-stream' },
);
export type StdinBody = Static<typeof StdinBody>;

export const ResizeBody = ptySize('The new size; the foreground job gets SIGWINCH');
export type ResizeBody = Static<typeof ResizeBody>;

export const Empty = Type.Object({}, { title: 'Empty', description: 'Done; nothing to say' });
export const Killed = Type.Object({ killed: Type.Boolean({ description: 'false: envd tracked no such pid' }) }, { title: 'Killed' });

/**
 * The events of a command stream (POST /commands/stream, GET /commands/{pid}/stream), name to data:
 * the OpenAPI document's `x-events` and the typed client's CommandEvent are both made from this map.
 */
const StreamName = Type.Unsafe<'stdout' | 'stderr'>(Type.String({ enum: ['stdout', 'stderr'] }));
export const StartEvent = Type.Object({ pid: Type.Integer() }, { title: 'StartEvent', description: 'First event: the command runs (again after a resume)' });
export const OutputEvent = Type.Object(
  { stream: StreamName, data: Type.String({ description: 'Text decoded as UTF-8 (invalid bytes become U+FFFD); never a split character' }) },
  { title: 'OutputEvent', description: 'Output of one stream; its SSE id is the position after it' },
);
export const TruncatedEvent = Type.Object(
  { stream: StreamName, bytes: Type.Integer({ minimum: 1, description: 'How many bytes of the stream are missing here' }) },
  { title: 'TruncatedEvent', description: 'Output that was not kept (past the cap or the budgets) and is missing at this point' },
);
/** `error` ends a stream that cannot go on (envd lost the command's holder, or its kept output cannot be read): attach again from the last id. */
export const CommandEvents = { start: StartEvent, ready: ReadyAnswer, stdout: OutputEvent, stderr: OutputEvent, truncated: TruncatedEvent, exit: ExitInfo, error: ErrorSchema };
