import { createHash } from 'node:crypto';
import { accessSync, constants, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { holderBinaryPath, writeHolderAsset } from '../../src/holder/binary.js';
import { makeTempRoot, useHolders } from '../helpers/holder.js';

useHolders();

describe('holder binary', () => {
  it('finds dist/envd-holder in cwd when running from sources under vitest', () => {
    const path = holderBinaryPath('/nonexistent-state-dir');
    expect(path).toBe(join(process.cwd(), 'dist', 'envd-holder'));
    accessSync(path, constants.X_OK);
  });

  it('writes the embedded holder once to <stateDir>/bin/envd-holder-<hash>, 0700, and reuses it', () => {
    const stateDir = makeTempRoot();
    const bytes = readFileSync(join(process.cwd(), 'dist', 'envd-holder'));
    const hash = createHash('sha256').update(bytes).digest('hex').slice(0, 12);
    const path = writeHolderAsset(stateDir, bytes);
    expect(path).toBe(join(stateDir, 'bin', `envd-holder-${hash}`));
    expect(statSync(path).mode & 0o777).toBe(0o700);
    expect(statSync(join(stateDir, 'bin')).mode & 0o777).toBe(0o700);
    expect(readFileSync(path).equals(bytes)).toBe(true);
    const inode = statSync(path).ino;
    expect(writeHolderAsset(stateDir, bytes)).toBe(path);
    expect(statSync(path).ino).toBe(inode); // reused, not rewritten
    expect(writeHolderAsset(stateDir, Buffer.from('another build'))).not.toBe(path);
    expect(readdirSync(join(stateDir, 'bin')).filter((name) => name.endsWith('.partial'))).toEqual([]);
  });

  it('keeps node:sea a runtime require in the CommonJS bundle', async () => {
    const result = await build({ entryPoints: ['src/holder/binary.ts'], bundle: true, platform: 'node', target: 'node24', format: 'cjs', write: false, logLevel: 'silent' });
    expect(result.outputFiles[0]!.text).toContain('require("node:sea")');
  });

  it('is embedded in the single executable', () => {
    // The SEA blob stores assets verbatim. The executable is dist/runtime/envd-node (dist/envd is the static
    // launcher that runs it, which links the same libc code: a slice of that would be found in it too).
    const holder = readFileSync(join(process.cwd(), 'dist', 'envd-holder'));
    const executable = readFileSync(join(process.cwd(), 'dist', 'runtime', 'envd-node'));
    const at = executable.indexOf(holder.subarray(0, 4096));
    expect(at).toBeGreaterThan(0);
    expect(executable.subarray(at, at + holder.length).equals(holder)).toBe(true);
  });
});
