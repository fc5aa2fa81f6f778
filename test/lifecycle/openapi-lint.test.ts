import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvdProcess, type EnvdProcess } from '../helpers/proc.js';

const run = promisify(execFile);

interface Problem {
  ruleId: string;
  severity: string;
  message: string;
  location: { pointer: string }[];
}

/** `redocly lint` (redocly.yaml: the recommended rules, exceptions with their reasons) on the document the built envd serves. */
async function lint(document: string): Promise<Problem[]> {
  const dir = mkdtempSync(join(tmpdir(), 'envd-openapi-lint-'));
  try {
    const file = join(dir, 'openapi.json');
    writeFileSync(file, document);
    const { stdout } = await run(resolve('node_modules/.bin/redocly'), ['lint', file, '--config', resolve('redocly.yaml'), '--format', 'json'], {
      // No telemetry, no update check: the lint needs no network.
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
      maxBuffer: 16 * 1024 * 1024,
    }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }));
    return (JSON.parse(stdout) as { problems: Problem[] }).problems;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

let envd: EnvdProcess;
let document: string;
beforeAll(async () => {
  envd = await startEnvdProcess([], { ENVD_ACCESS_TOKEN: 'tok' });
  document = await (await fetch(`${envd.url}/openapi.json`, { headers: { authorization: 'Bearer tok' } })).text();
});
afterAll(async () => envd?.stop());

describe('redocly lint of the OpenAPI document', () => {
  it('finds no error and no warning', { timeout: 60_000 }, async () => {
    const problems = await lint(document);
    expect(problems.map((p) => `${p.severity} ${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`)).toEqual([]);
  });

  it('reports a document without operationIds (the lint is not vacuous)', { timeout: 60_000 }, async () => {
    const broken = JSON.parse(document);
    delete broken.paths['/files/raw'].put.operationId;
    delete broken.servers;
    const rules = new Set((await lint(JSON.stringify(broken))).map((p) => p.ruleId));
    expect(rules).toContain('operation-operationId');
    expect(rules).toContain('no-empty-servers');
  });
});
