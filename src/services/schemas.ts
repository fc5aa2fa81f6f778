import { Type, type Static } from '@sinclair/typebox';
import { Limits } from '../cgroups/limits.js';
import { readyFields } from '../commands/ready-schemas.js';

/** A service's name: a file name under /etc/envd/services too, so no slash, no leading dot. */
export const SERVICE_NAME = '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$';
/** How many services a sandbox may declare. */
export const MAX_SERVICES = 256;
/** How many services one may depend on. */
export const MAX_DEPENDENCIES = 64;

export const RESTART_POLICIES = ['always', 'on-failure', 'no'] as const;
export type RestartPolicy = (typeof RESTART_POLICIES)[number];

export const SERVICE_STATES = ['waiting', 'starting', 'ready', 'running', 'backoff', 'failed', 'stopped'] as const;
export type ServiceState = (typeof SERVICE_STATES)[number];

/** PUT /services/{name}, and /etc/envd/services/NAME.json: the same body. */
export const ServiceBody = Type.Object(
  {
    cmd: Type.String({ minLength: 1, description: 'Run as `bash -l -c <cmd>` (else sh); with `args`, the program run with them and no shell' }),
    args: Type.Optional(Type.Array(Type.String(), { description: 'Arguments of `cmd` run as a program, with no shell' })),
    user: Type.Optional(Type.String({ minLength: 1, description: 'Unix user (a name; `uid`, `uid:gid` or `name:group` as an image\'s USER); default: default_user' })),
    cwd: Type.Optional(Type.String({ minLength: 1, description: 'Absolute working directory; default: default_workdir, else the user\'s home' })),
    envs: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'Merged over the sandbox envs' })),
    restart: Type.Optional(
      Type.Unsafe<RestartPolicy>(
        Type.String({ enum: [...RESTART_POLICIES], description: 'always: whenever it ends; on-failure (default): unless it exited 0; no: never' }),
      ),
    ),
    depends_on: Type.Optional(
      Type.Array(Type.String({ pattern: SERVICE_NAME }), { maxItems: MAX_DEPENDENCIES, uniqueItems: true, description: 'Services that must be ready (or running, without a check) before this one starts' }),
    ),
    limits: Type.Optional(Limits),
    ...readyFields,
  },
  { additionalProperties: false, title: 'ServiceDefinition', description: 'A supervised command' },
);
export type ServiceDefinition = Static<typeof ServiceBody>;

export const ServiceNameParams = Type.Object({ name: Type.String({ pattern: SERVICE_NAME, description: 'The service\'s name' }) });

const LastExit = Type.Object(
  {
    exit_code: Type.Integer(),
    signal: Type.Union([Type.String(), Type.Null()], { description: 'The signal that ended it, e.g. "SIGKILL"' }),
    reason: Type.String({ description: 'As a command\'s: exited, signaled, killed, timed_out, oom_killed, pids_exhausted' }),
  },
  { title: 'ServiceExit' },
);

export const ServiceRecord = Type.Object(
  {
    name: Type.String(),
    state: Type.Unsafe<ServiceState>(
      Type.String({
        enum: [...SERVICE_STATES],
        description:
          'waiting (for its dependencies), starting (runs, its ready check pending), ready (its check passed), running (runs, no check), backoff (ended; restarts after backoff_ms), failed (ended and stays down, or cannot start: see error), stopped',
      }),
    ),
    pid: Type.Union([Type.Integer(), Type.Null()], { description: 'The current run\'s command pid (a tracked command: /commands/{pid}/...)' }),
    restarts: Type.Integer({ description: 'Restarts by its restart policy since it was defined' }),
    last_exit: Type.Union([LastExit, Type.Null()]),
    started_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'When the current (or last) run started' }),
    ready_after_ms: Type.Union([Type.Integer(), Type.Null()], { description: 'How long after its start the current run became ready' }),
    backoff_ms: Type.Union([Type.Integer(), Type.Null()], { description: 'In backoff: the delay before the next start' }),
    error: Type.Union([Type.String(), Type.Null()], { description: 'Why it is failed or waiting: a cycle, a missing dependency, a start that failed' }),
    definition: ServiceBody,
  },
  { title: 'Service' },
);
export type ServiceRecord = Static<typeof ServiceRecord>;

export const ServiceList = Type.Object({ services: Type.Array(ServiceRecord) }, { title: 'ServiceList' });

export const ServiceLogsQuery = Type.Object(
  {
    from: Type.Optional(Type.String({ description: 'Start after this cursor (<stdout bytes>-<stderr bytes>, an event id); the Last-Event-ID header does the same' })),
    follow: Type.Optional(
      Type.Unsafe<'1' | 'true' | '0' | 'false'>(
        Type.String({ enum: ['1', 'true', '0', 'false'], description: '1 (or true): server-sent events, the output from `from`, then live until the run ends (as GET /commands/{pid}/stream)' }),
      ),
    ),
    encoding: Type.Optional(Type.Unsafe<'utf8' | 'base64'>(Type.String({ enum: ['utf8', 'base64'], description: 'With follow: output events as text (default) or base64 bytes' }))),
  },
  { additionalProperties: false },
);

export const ServiceLogs = Type.Object(
  {
    pid: Type.Integer({ description: 'The run the output is of' }),
    stdout: Type.String(),
    stderr: Type.String(),
    cursor: Type.String({ description: 'Where this answer ends: pass it as `from` for what comes next' }),
    more: Type.Boolean({ description: 'More kept output follows the cursor already (the answer stopped at its size limit)' }),
  },
  { title: 'ServiceLogs' },
);

export const ServiceDeleted = Type.Object({ deleted: Type.Literal(true) }, { title: 'ServiceDeleted' });
