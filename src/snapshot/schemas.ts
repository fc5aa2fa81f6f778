import { Type } from '@sinclair/typebox';

/** The longest a prepare waits for cgroups to read back frozen. */
export const MAX_FREEZE_WAIT_MS = 60_000;
/** The auto-thaw's bounds: soon enough that a dead control plane never leaves a sandbox frozen for long. */
export const MIN_THAW_AFTER_MS = 100;
export const MAX_THAW_AFTER_MS = 3_600_000;

export const PrepareBody = Type.Object(
  {
    freeze: Type.Optional(
      Type.String({
        enum: ['commands', 'all', 'none'],
        description: "commands (the default): every command's and service's cgroup; all: every cgroup but envd's own (and PID 1's and the journal's); none",
      }),
    ),
    fsfreeze: Type.Optional(Type.Boolean({ description: 'Freeze each writable block-device filesystem (FIFREEZE), for filesystem-only snapshots' })),
    drop_caches: Type.Optional(Type.Boolean({ description: 'Drop the clean page cache and reclaimable slab, and compact memory, so a memory snapshot leaves them out' })),
    max_wait_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_FREEZE_WAIT_MS, description: 'How long to wait for the cgroups to read back frozen (default 2000)' })),
    thaw_after_ms: Type.Optional(
      Type.Integer({ minimum: MIN_THAW_AFTER_MS, maximum: MAX_THAW_AFTER_MS, description: "Thaw by itself after this much of the guest's running time unless /init or /snapshot/thaw came first (default 30000)" }),
    ),
  },
  { additionalProperties: false, title: 'PrepareRequest' },
);

export const PrepareAnswer = Type.Object(
  {
    frozen: Type.Integer({ minimum: 0, description: 'Cgroups frozen and read back frozen' }),
    unconfirmed: Type.Integer({ minimum: 0, description: 'Cgroups told to freeze that did not read back frozen within max_wait_ms' }),
    synced_ms: Type.Number({ minimum: 0, description: 'How long sync(2) took' }),
    dropped_bytes: Type.Integer({ minimum: 0, description: 'Page cache and reclaimable slab dropped (0 without drop_caches)' }),
    fs_frozen: Type.Array(Type.String(), { description: 'Mount points frozen (FIFREEZE)' }),
    envd_rss_before: Type.Integer({ minimum: 0, description: "envd's RSS before it trimmed its own memory" }),
    envd_rss_after: Type.Integer({ minimum: 0, description: "envd's RSS after a full collection and malloc_trim" }),
    took_ms: Type.Number({ minimum: 0, description: 'The whole prepare' }),
  },
  { title: 'PrepareResult' },
);

export const ThawAnswer = Type.Object(
  {
    thawed: Type.Integer({ minimum: 0, description: 'Cgroups thawed (0 when nothing was frozen)' }),
    fs_thawed: Type.Array(Type.String(), { description: 'Mount points thawed' }),
    by: Type.String({ enum: ['request', 'init', 'timer', 'failed-prepare', 'close'], description: 'What thawed them' }),
  },
  { title: 'ThawResult' },
);
