import { Limits } from '../cgroups/limits.js';
import { Type, type TObject, type TString } from '@sinclair/typebox';
import { ErrorSchema } from '../errors.js';
import { MAX_ENTROPY_BYTES, MAX_HOSTNAME_LENGTH, MIN_ENTROPY_BYTES } from './identity.js';
import { MAX_CA_BUNDLE_BYTES } from './trust-store.js';

/** The body of every error answer. */

/** ErrorSchema with the description the OpenAPI document shows for one status. */
export const errorResponse = (description: string): TObject<{ message: TString }> => ({ ...ErrorSchema, description });

/** Upper bound for an access token: it must fit comfortably in an Authorization header. */
export const MAX_TOKEN_LENGTH = 4096;

// Visible ASCII only: a token with a space or a non-ASCII character could never be sent back in
// `Authorization: Bearer <token>`, and setting one would lock the orchestrator out of the sandbox.
const TOKEN_PATTERN = '^[\\x21-\\x7E]+$';
const ISO_8601 = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?(Z|[+-]\\d{2}:\\d{2})$';

export const EnvsSchema = Type.Record(Type.String(), Type.String(), { title: 'Envs', description: 'Sandbox environment variables' });

export const InitBody = Type.Object(
  {
    access_token: Type.Optional(
      Type.String({ minLength: 1, maxLength: MAX_TOKEN_LENGTH, pattern: TOKEN_PATTERN, description: 'New access token; replaces the current one at once' }),
    ),
    envs: Type.Optional({ ...EnvsSchema, description: 'Replaces the sandbox envs (no merge)' }),
    default_user: Type.Optional(Type.String({ minLength: 1, description: 'Unix user for commands and file ownership when a request names none' })),
    default_workdir: Type.Optional(Type.String({ minLength: 1, description: 'Absolute path of an existing directory' })),
    default_limits: Type.Optional({ ...Limits, description: "Limits for every command that names none of its own (each field separately); {} clears them" }),
    forward_loopback: Type.Optional(Type.Boolean({ description: "false: loopback-only listeners are no longer made reachable on the guest's other addresses (envd's listeners close; open connections run on); true: again" })),
    timestamp: Type.Optional(
      Type.String({ pattern: ISO_8601, description: "The host's current time, ISO 8601 (e.g. 2026-01-02T03:04:05.678Z)" }),
    ),
    entropy: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: Math.ceil(MAX_ENTROPY_BYTES / 3) * 4,
        description: `Base64 of ${MIN_ENTROPY_BYTES} to ${MAX_ENTROPY_BYTES} random bytes, credited to the kernel's pool (RNDADDENTROPY); envd reseeds its own generator too. Send a new one to every fork`,
      }),
    ),
    hostname: Type.Optional(Type.String({ minLength: 1, maxLength: MAX_HOSTNAME_LENGTH, description: 'Sets the kernel host name and /etc/hostname' })),
    machine_id: Type.Optional(Type.String({ minLength: 32, maxLength: 32, description: '32 hex digits, written to /etc/machine-id' })),
    ca_bundle: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: MAX_CA_BUNDLE_BYTES,
        description: "PEM certificates added to the image's trust store (Debian, Alpine/busybox and RHEL layouts); commands get SSL_CERT_FILE, NODE_EXTRA_CA_CERTS and REQUESTS_CA_BUNDLE naming it",
      }),
    ),
  },
  { additionalProperties: false, title: 'InitRequest' },
);

export const HealthSchema = Type.Object({ status: Type.Literal('ok'), version: Type.String() }, { title: 'Health' });

export const MetricsSchema = Type.Object(
  {
  cpu_count: Type.Integer({ minimum: 1, description: 'CPUs listed in /proc/stat' }),
  cpu_used_pct: Type.Number({ minimum: 0, maximum: 100, description: 'Busy share of all CPUs since the previous /metrics call (since boot on the first)' }),
  mem_total_mib: Type.Integer({ minimum: 0, description: 'MemTotal from /proc/meminfo' }),
  mem_used_mib: Type.Integer({ minimum: 0, description: 'MemTotal − MemAvailable' }),
  disk_total_bytes: Type.Integer({ minimum: 0, description: 'Size of the file system holding /' }),
  disk_used_bytes: Type.Integer({ minimum: 0, description: 'Blocks in use on /, as df counts them' }),
  processes_tracked: Type.Integer({ minimum: 0, description: 'Commands envd tracks' }),
  envd_rss_bytes: Type.Integer({ minimum: 0, description: "envd's resident set size" }),
  output_memory_bytes: Type.Integer({ minimum: 0, description: 'Kept command output held in memory (tmpfs under the state dir), all commands together' }),
  output_spool_bytes: Type.Integer({ minimum: 0, description: 'Kept command output in the spool on disk, all commands together' }),
  client_memory_bytes: Type.Integer({ minimum: 0, description: "Memory taken now from envd's budget for clients: streams, transfers, archives, watches (src/memory-budget.ts)" }),
  uptime_s: Type.Number({ minimum: 0, description: 'System uptime from /proc/uptime' }),
  commands_mode: Type.String({ enum: ['cgroup', 'proc'], description: 'cgroup: a cgroup v2 per command (limits, cgroup.kill, reasons oom_killed and pids_exhausted); proc: the /proc walk, no limits' }),
  commands_mode_reason: Type.Optional(Type.String({ description: 'Why envd runs without cgroups (proc mode)' })),
  commands_cpu_usec: Type.Optional(Type.Integer({ minimum: 0, description: 'CPU time of all commands together (cgroup mode)' })),
  commands_memory_bytes: Type.Optional(Type.Integer({ minimum: 0, description: 'memory.current of all commands together (cgroup mode)' })),
  commands_pids: Type.Optional(Type.Integer({ minimum: 0, description: 'Processes and threads of all commands now (cgroup mode)' })),
  },
  { title: 'Metrics' },
);

export const OpenApiSchema = Type.Object(
  {
    openapi: Type.String(),
    info: Type.Object({ title: Type.String(), version: Type.String() }, { additionalProperties: true }),
    paths: Type.Record(Type.String(), Type.Unknown()),
  },
  { additionalProperties: true, title: 'OpenApiDocument', description: 'An OpenAPI 3 document' },
);
