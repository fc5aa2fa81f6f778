import { Type, type Static } from '@sinclair/typebox';
import { ErrorSchema } from '../errors.js';


const PathField = Type.String({ description: 'absolute path' });
const Username = Type.String({ description: 'owner of created files and directories; default: default_user' });
export const Encoding = Type.Union([Type.Literal('utf8'), Type.Literal('base64')], { default: 'utf8' });

export const PathQuery = Type.Object({ path: PathField });
export const UploadQuery = Type.Object({ path: PathField, username: Type.Optional(Username) });
export const ReadQuery = Type.Object({
  path: PathField,
  encoding: Type.Optional(Encoding),
  from_line: Type.Optional(Type.Integer({ minimum: 1, description: 'first line to answer (1-based); with it or `lines`, a file of any size can be read' })),
  lines: Type.Optional(Type.Integer({ minimum: 1, description: 'how many lines at most; default: to the end' })),
});

/** Deeper than this a listing is refused: a bound on work and memory, deep enough for any real tree. */
export const MAX_LIST_DEPTH = 32;
export const ListQuery = Type.Object({ path: PathField, depth: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_LIST_DEPTH, default: 1 })) });

export const WriteBody = Type.Object(
  { path: PathField, data: Type.String(), encoding: Type.Optional(Encoding), username: Type.Optional(Username) },
  { additionalProperties: false, title: 'WriteFileRequest' },
);
export const BatchBody = Type.Object(
  {
    files: Type.Array(Type.Object({ path: PathField, data: Type.String(), encoding: Type.Optional(Encoding) }, { additionalProperties: false })),
    username: Type.Optional(Username),
  },
  { additionalProperties: false, title: 'WriteFilesRequest' },
);
export const RenameBody = Type.Object({ from: PathField, to: PathField }, { additionalProperties: false, title: 'MoveEntryRequest' });
export const MkdirBody = Type.Object({ path: PathField, username: Type.Optional(Username) }, { additionalProperties: false, title: 'MakeDirectoryRequest' });
export const WatchBody = Type.Object({ path: PathField, recursive: Type.Optional(Type.Boolean({ default: false })) }, { additionalProperties: false, title: 'WatchDirectoryRequest' });

/** At most this many edits in one request. */
export const MAX_EDITS = 1000;
export const EditBody = Type.Object(
  {
    path: PathField,
    edits: Type.Array(
      Type.Object(
        {
          old: Type.String({ minLength: 1, description: 'exact text to find' }),
          new: Type.String({ description: 'what replaces each occurrence' }),
          count: Type.Optional(Type.Integer({ minimum: 1, default: 1, description: 'how many times `old` must occur; otherwise 409' })),
        },
        { additionalProperties: false },
      ),
      { minItems: 1, maxItems: MAX_EDITS },
    ),
    expect_sha256: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$', description: "the file's current sha256; otherwise 409" })),
  },
  { additionalProperties: false },
);

export const Sha256 = Type.String({ pattern: '^[0-9a-f]{64}$', description: 'sha256 of the bytes written, hex' });
export const Written = Type.Object({ path: Type.String(), size: Type.Integer(), sha256: Sha256 }, { title: 'WrittenFile' });
export const InfoQuery = Type.Object({
  path: PathField,
  checksum: Type.Optional(Type.Unsafe<'sha256'>(Type.String({ enum: ['sha256'], description: "Also compute the file's sha256 (a regular file only; read whole)" }))),
});
export const ArchiveQuery = Type.Object({
  path: PathField,
  format: Type.Optional(Type.Unsafe<'tar' | 'tar.gz'>(Type.String({ enum: ['tar', 'tar.gz'], default: 'tar', description: 'tar (default) or tar.gz' }))),
  sha256: Type.Optional(
    Type.Boolean({
      default: false,
      description: "true: each file's sha256 in the stream, as pax global headers whose `comment` is `envd-sha256 HEX…` (the files since the previous one, in order; one before the end of the archive). Other tar readers ignore them; `envd cp` checks them",
    }),
  ),
});
export const ExtractQuery = Type.Object({
  path: PathField,
  mode: Type.Optional(
    Type.Unsafe<'create' | 'merge' | 'replace'>(
      Type.String({ enum: ['create', 'merge', 'replace'], default: 'create', description: 'create: path must not exist; merge: into what is there, all or nothing (a directory where a file is, or a file where a non-empty directory is, is a 409); replace: the whole tree swapped at once' }),
    ),
  ),
  username: Type.Optional(Username),
});
export const Extracted = Type.Object({ path: Type.String(), files: Type.Integer(), bytes: Type.Integer(), sha256: Sha256 }, { title: 'ExtractedArchive' });
/** What GET /files/archive streams (documentation only). */
export const ArchiveBytes = Type.Unknown({ description: 'a tar (application/x-tar) or tar.gz (application/gzip) of the tree' });
export const Edited = Type.Object(
  {
  path: Type.String(),
  size: Type.Integer(),
  sha256: Sha256,
  replacements: Type.Integer(),
  diff: Type.String({ description: 'unified diff of the change, at most 64 KiB' }),
  diff_truncated: Type.Boolean(),
  },
  { title: 'EditedFile' },
);
export const BatchWritten = Type.Object({ files: Type.Array(Written) }, { title: 'WrittenFiles' });
export const FileContent = Type.Object(
  {
  path: Type.String(),
  data: Type.String(),
  encoding: Encoding,
  size: Type.Integer({ description: "the file's size in bytes" }),
  from_line: Type.Optional(Type.Integer()),
  lines: Type.Optional(Type.Integer({ description: 'how many lines `data` holds' })),
  total_lines: Type.Optional(Type.Integer()),
  },
  { title: 'FileContent' },
);
/** What GET /files/raw streams (documentation only: a stream is never serialised). */
export const FileBytes = Type.Unknown({ description: 'the file bytes, application/octet-stream' });
export const Exists = Type.Object({ exists: Type.Boolean() }, { title: 'Exists' });
export const Entry = Type.Object(
  {
  name: Type.String(),
  path: Type.String(),
  type: Type.Union([Type.Literal('file'), Type.Literal('dir'), Type.Literal('symlink')]),
  size: Type.Integer(),
  mode: Type.Integer({ description: 'permission bits, e.g. 420 for 0644' }),
  permissions: Type.String({ description: 'ls -l style, e.g. -rw-r--r--' }),
  owner: Type.String(),
  group: Type.String(),
  modified_at: Type.String({ format: 'date-time' }),
  symlink_target: Type.Optional(Type.String()),
  sha256: Type.Optional(Sha256),
  },
  { title: 'EntryInfo', description: 'A file, directory or symlink (never followed)' },
);
export const EntryList = Type.Object({ entries: Type.Array(Entry) }, { title: 'EntryList' });
export const Made = Type.Object({ path: Type.String(), created: Type.Boolean({ description: 'false: it was already there' }) }, { title: 'MadeDirectory' });
export const Removed = Type.Object({ removed: Type.Boolean({ description: 'false: nothing was there' }) }, { title: 'Removed' });

export type EncodingName = Static<typeof Encoding>;

/** Error responses shared by the routes, so the OpenAPI document shows the `{ message }` shape. */
export const errors = (...statuses: number[]) => Object.fromEntries(statuses.map((status) => [status, ErrorSchema]));

/**
 * The events of POST /files/watch, name to data: the OpenAPI document's `x-events` and the
 * typed client's WatchEvent are both made from this map. They carry no SSE id (nothing to resume from).
 */
export const WatchReadyEvent = Type.Object({ path: Type.String() }, { title: 'WatchReadyEvent', description: 'First event: every directory is watched; changes from here on are seen' });
export const WatchChangeEvent = Type.Object(
  {
    type: Type.Unsafe<'create' | 'modify' | 'delete'>(Type.String({ enum: ['create', 'modify', 'delete'] })),
    path: Type.String({ description: 'Absolute path of what changed' }),
  },
  { title: 'WatchChangeEvent' },
);
export const WatchEvents = { ready: WatchReadyEvent, change: WatchChangeEvent, error: ErrorSchema };
