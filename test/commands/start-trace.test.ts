import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { useCommandServer } from '../helpers/command-user.js';

// ENVD_START_TRACE (docs/operations.md) is read when the module loads: set before any import of envd's code.
const traced = vi.hoisted(() => {
  const { mkdtempSync: temp } = require('node:fs') as typeof import('node:fs');
  const dir = temp(`${require('node:os').tmpdir()}/envd-start-trace-`);
  process.env.ENVD_START_TRACE = `${dir}/trace.log`;
  return { dir, file: `${dir}/trace.log` };
});
afterAll(() => {
  delete process.env.ENVD_START_TRACE;
  rmSync(traced.dir, { recursive: true, force: true });
});

const fixture = useCommandServer();
const STEPS = ['received>handler', 'handler>prepared', 'prepared>spawner-asked', 'spawner-asked>ready-read', 'ready-read>linked', 'linked>exit-seen', 'exit-seen>result-read', 'result-read>finish'];

describe('ENVD_START_TRACE', () => {
  it('writes one line per foreground command with every step of its start, in order, adding up to the total', async () => {
    const { status } = await fixture.server.json('POST', '/commands', { cmd: 'true' });
    expect(status).toBe(200);
    const read = () => readFileSync(traced.file, 'utf8').split('\n').filter(Boolean);
    await waitFor(() => { try { return read().length === 1; } catch { return false; } }, 5_000, 'the trace line');
    const [line] = read();
    const fields = line!.split(' ');
    expect(fields.slice(0, 2)).toEqual(['start-trace', 'at']);
    const total = Number(fields[4]);
    const steps = fields.slice(5);
    expect(steps.filter((_, i) => i % 2 === 0)).toEqual(STEPS);
    const sum = steps.filter((_, i) => i % 2 === 1).map(Number).reduce((a, b) => a + b, 0);
    expect(Math.abs(sum - total)).toBeLessThan(0.1 * STEPS.length);
  });

  it('shows a refused command ending where it was refused', async () => {
    const before = readFileSync(traced.file, 'utf8').split('\n').filter(Boolean).length;
    expect((await fixture.server.json('POST', '/commands', { cmd: 'true', cwd: '/no/such/dir' })).status).toBe(400);
    const lines = () => readFileSync(traced.file, 'utf8').split('\n').filter(Boolean);
    await waitFor(() => lines().length === before + 1, 5_000, 'the trace line');
    expect(lines().at(-1)).toMatch(/ received>handler [\d.]+ handler>finish [\d.]+$/);
  });
});
