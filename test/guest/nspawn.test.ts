import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe } from 'vitest';
import { createClient, waitForHealth, type EnvdClient } from './client.js';
import { startNspawn, type NspawnGuest } from './nspawn.js';
import { registerScenario } from './scenario.js';

describe('envd in a systemd-nspawn container booted from the guest rootfs', () => {
  let dir: string;
  let machine: NspawnGuest;
  let client: EnvdClient;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'envd-nspawn-'));
    machine = await startNspawn(join(dir, 'console.log'));
    const readyMs = await waitForHealth(machine.url, 60_000, () => machine.child.exitCode === null);
    console.log(`nspawn: boot to first /health 200 in ${readyMs} ms`);
    client = createClient(machine.url);
  });

  afterAll(async () => {
    await machine?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  registerScenario(() => ({ client, name: 'nspawn' }), randomBytes(24).toString('hex'));
});
