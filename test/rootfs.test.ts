import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import pkg from '../package.json' with { type: 'json' };

describe('the guest unit', () => {
  it('runs envd with the environment package.json says envd is deployed with', () => {
    const unit = readFileSync('rootfs/envd.service', 'utf8');
    for (const [name, value] of Object.entries(pkg.envd.env)) expect(unit).toContain(`\nEnvironment=${name}=${value}\n`);
  });

  it('stops envd with SIGHUP, which leaves its commands running for the next envd', () => {
    const unit = readFileSync('rootfs/envd.service', 'utf8');
    expect(unit).toMatch(/\nKillSignal=SIGHUP\n/);
    expect(unit).toMatch(/\nKillMode=process\n/);
  });

  it('keeps envd running when the OOM killer takes one of its commands', () => {
    expect(readFileSync('rootfs/envd.service', 'utf8')).toMatch(/\nOOMPolicy=continue\n/);
  });
});
