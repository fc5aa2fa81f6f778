import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };

const EXECUTABLE = `${process.cwd()}/dist/envd`;

describe('dist/envd, the single executable installed into guests', () => {
  it('prints its version with an empty environment (no node on PATH)', () => {
    expect(execFileSync(EXECUTABLE, ['--version'], { env: {}, encoding: 'utf8' })).toBe(`${pkg.version}\n`);
  });

  it('serves /health and exits 0 on SIGTERM', async () => {
    const child = spawn(EXECUTABLE, ['--host', '127.0.0.1', '--port', '0'], { env: {}, stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`dist/envd exited with ${code}`)));
        createInterface({ input: child.stdout! }).on('line', (line) => {
          const match = /listening at (http:\/\/[\d.]+:\d+)/.exec(line);
          if (match) resolve(match[1]!);
        });
      });
      const response = await fetch(`${url}/health`);
      expect(await response.json()).toMatchObject({ status: 'ok', version: pkg.version });
      child.kill('SIGTERM');
      const [code] = await once(child, 'exit');
      expect(code).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
});
