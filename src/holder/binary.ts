import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { getAsset, isSea } from 'node:sea';

/**
 * The first 12 hex of the holder binary's sha256, computed by build.mjs (esbuild
 * `define`): hashing the asset at every start loaded node:crypto for it alone
 * (1.4 MiB of idle RSS). Undefined when running from sources.
 */
declare const ENVD_HOLDER_HASH: string | undefined;

/** The name of the SEA asset (build.mjs puts dist/envd-holder there). */
const ASSET = 'envd-holder';

/**
 * Where envd-holder is on this machine. The single executable carries it as an
 * asset and writes it out once to `<stateDir>/bin/envd-holder-<hash>`, so the
 * guest image needs no second file and an upgraded envd never runs an old
 * holder; `node dist/envd.js` uses the dist/envd-holder built beside it, and
 * tests running from sources (vitest) the one `npm run build` made in cwd.
 * Meant to be called once at startup: it hashes the binary.
 */
export function holderBinaryPath(stateDir: string): string {
  if (isSea()) {
    const hash = typeof ENVD_HOLDER_HASH === 'string' ? ENVD_HOLDER_HASH : undefined;
    // A restart of the same build finds it written: no copy of the 700 KB asset then.
    const written = hash && stateBinaryPath(stateDir, `envd-holder-${hash}`);
    if (written && existsSync(written)) return written;
    return writeHolderAsset(stateDir, new Uint8Array(getAsset(ASSET)), hash);
  }
  return besideTheBundle('envd-holder');
}

/**
 * A file build.mjs puts in dist/ beside envd.js, for `node dist/envd.js` (the
 * single executable carries its own as assets): next to the running bundle,
 * or, for tests running from sources (vitest), in cwd's dist/.
 */
export function besideTheBundle(name: string): string {
  const candidates = [join(dirname(process.argv[1] ?? ''), name)];
  if (process.env.VITEST) candidates.push(join(process.cwd(), 'dist', name));
  const found = candidates.find((path) => existsSync(path));
  if (!found) throw new Error(`${name} not found (looked at ${candidates.join(', ')}): run npm run build`);
  return found;
}

/**
 * Writes the holder binary to `<stateDir>/bin/envd-holder-<first 12 hex of its
 * sha256>` unless that file is already there (a restarted envd of the same
 * build reuses it; holders still running from it keep it busy anyway).
 */
export function writeHolderAsset(stateDir: string, bytes: Uint8Array, hash = createHash('sha256').update(bytes).digest('hex').slice(0, 12)): string {
  return writeStateBinary(stateDir, `envd-holder-${hash}`, bytes);
}

/**
 * Writes one of the executable's assets to `<stateDir>/bin/<name>` (mode 0700)
 * unless it is there already. Temp + rename, so a crash mid-write never leaves
 * a truncated file under the final name. The name carries the content's hash,
 * so an upgraded envd never uses an old one.
 */
export function writeStateBinary(stateDir: string, name: string, bytes: Uint8Array): string {
  const path = stateBinaryPath(stateDir, name);
  const dir = dirname(path);
  if (existsSync(path)) return path;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const partial = `${path}.${process.pid}.partial`;
  try {
    writeFileSync(partial, bytes, { mode: 0o700 });
    chmodSync(partial, 0o700); // the mode above is masked by the umask
    renameSync(partial, path);
  } catch (error) {
    rmSync(partial, { force: true });
    throw error;
  }
  return path;
}

export function stateBinaryPath(stateDir: string, name: string): string {
  return join(stateDir, 'bin', name);
}
