import { createHash, type Hash } from 'node:crypto';
import { encodeGlobalComment, type TarHeader } from './format.js';
import type { TarVisitor } from './read.js';

/**
 * Per-file sha256 inside a tar stream, so that a downloaded tree is checked
 * end to end as an upload is (issue 44): tar checksums its headers, never
 * the data, and a byte changed on the way (a proxy, a buffer reused too
 * early) went unseen.
 *
 * The writer hashes each regular file's data as it goes into the stream and,
 * after every FILES_PER_MANIFEST files and before the end of the archive,
 * adds a pax global header whose `comment` record lists those files' digests
 * in order: `envd-sha256 HEX HEX …`. A header before a file could not hold its
 * hash without reading the file twice; these come after. POSIX says a
 * `comment` "shall be ignored", and GNU tar, bsdtar and Python's tarfile do,
 * without a word, so the stream stays a plain tar for everyone else.
 *
 * The reader (verifyingChecksums) hashes each file's data as it is
 * extracted and compares at each manifest: a difference names the file.
 */

/** Digests per manifest: 256 × 65 bytes, a 17 KB header, bounded whatever the tree. */
export const FILES_PER_MANIFEST = 256;
const MARK = 'envd-sha256';

/** The writer's side: the digests of the files since the last manifest. */
export class FileChecksums {
  private hash: Hash | undefined;
  /** In the files' order; a small file's digest arrives once its read is done (the writer reads several at once). */
  private digests: Array<string | undefined> = [];

  /** Bytes of the current (large) file's data, in order. */
  update(bytes: Buffer): void {
    (this.hash ??= createHash('sha256')).update(bytes);
  }

  /** The current (large) file is complete (an empty file is one too). */
  endFile(): void {
    this.digests.push((this.hash ?? createHash('sha256')).digest('hex'));
    this.hash = undefined;
  }

  /** A small file's place, in order; the function takes its whole data once read. */
  reserve(): (data: Buffer) => void {
    const at = this.digests.push(undefined) - 1;
    return (data) => {
      this.digests[at] = createHash('sha256').update(data).digest('hex');
    };
  }

  /** Whether FILES_PER_MANIFEST files wait for a manifest. */
  due(): boolean {
    return this.digests.length >= FILES_PER_MANIFEST;
  }

  /**
   * The manifest's header blocks when FILES_PER_MANIFEST files wait (or `last`: whatever waits, even none).
   * Every reserved digest must be in by now: a read that failed ends the archive with that error instead.
   */
  manifest(last = false): Buffer | undefined {
    if (!last && !this.due()) return undefined;
    if (this.digests.includes(undefined)) throw new Error('a file of the archive could not be read');
    const comment = [MARK, ...this.digests].join(' ');
    this.digests = [];
    return encodeGlobalComment(comment);
  }
}

/** A file whose data differs from what envd sent. */
export class ChecksumMismatch extends Error {}

/**
 * `visitor` with every regular file's data hashed and checked against the
 * manifests in the stream. The archive must end with a manifest that covers
 * every file (one stripped or cut is an error too, not a tree taken on trust).
 */
export function verifyingChecksums(visitor: TarVisitor): TarVisitor {
  let current: { name: string; hash: Hash } | undefined;
  /** Files since the last manifest: at most FILES_PER_MANIFEST unless the stream is not envd's. */
  let waiting: Array<{ name: string; digest: string }> = [];
  let manifests = 0;
  return {
    entry(header: TarHeader) {
      if (header.type === 'file') current = { name: header.name, hash: createHash('sha256') };
      return visitor.entry(header);
    },
    data(piece: Buffer) {
      current?.hash.update(piece);
      return visitor.data(piece);
    },
    end() {
      if (current) {
        waiting.push({ name: current.name, digest: current.hash.digest('hex') });
        if (waiting.length > FILES_PER_MANIFEST) throw new ChecksumMismatch(`more than ${FILES_PER_MANIFEST} files without a checksum (the archive is not envd's, or was changed on the way)`);
        current = undefined;
      }
      return visitor.end();
    },
    global(records: Map<string, string>) {
      const comment = records.get('comment');
      if (comment === undefined || !comment.startsWith(MARK)) return;
      const digests = comment.slice(MARK.length).split(' ').filter(Boolean);
      if (digests.length !== waiting.length) throw new ChecksumMismatch(`a checksum list of ${digests.length} files where ${waiting.length} came (the archive was changed on the way)`);
      waiting.forEach((file, index) => {
        if (file.digest !== digests[index]) throw new ChecksumMismatch(`${file.name}: the bytes received (sha256 ${file.digest.slice(0, 12)}…) are not those envd sent (sha256 ${digests[index]!.slice(0, 12)}…)`);
      });
      waiting = [];
      manifests++;
    },
    finish() {
      if (manifests === 0 || waiting.length > 0) throw new ChecksumMismatch(`the archive ended without the checksums of ${waiting.length} files (was it cut, or not sent with sha256=true?)`);
    },
  };
}
