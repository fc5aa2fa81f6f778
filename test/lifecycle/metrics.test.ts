import { execFileSync } from 'node:child_process';
import { cpus, totalmem, uptime } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { parseProcStat } from '../../src/lifecycle/metrics.js';
import { countFds, rssBytes } from '../helpers/proc.js';
import { startServer, type TestServer } from '../helpers/server.js';

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const FIELDS = ['cpu_count', 'cpu_used_pct', 'mem_total_mib', 'mem_used_mib', 'disk_total_bytes', 'disk_used_bytes', 'processes_tracked', 'envd_rss_bytes', 'uptime_s', 'output_memory_bytes', 'output_spool_bytes', 'client_memory_bytes'];
const MiB = 1024 * 1024;

describe('GET /metrics', () => {
  it('needs the token', async () => {
    server = await startServer({}, { setClock: async () => {} });
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
  });

  it('reports every field as a number, matching what the system itself says', async () => {
    server = await startServer({}, { setClock: async () => {} });
    const { status, body } = await server.json('GET', '/metrics');
    expect(status).toBe(200);
    // Plus how commands run: proc mode here, with why (an in-process test server never sets up cgroups).
    expect(Object.keys(body).sort()).toEqual([...FIELDS, 'commands_mode', 'commands_mode_reason'].sort());
    expect(body.commands_mode).toBe('proc');
    for (const field of FIELDS) expect(typeof body[field], field).toBe('number');
    for (const field of FIELDS.filter((f) => !['cpu_used_pct', 'uptime_s'].includes(f))) expect(Number.isInteger(body[field]), field).toBe(true);

    expect(body.cpu_count).toBe(cpus().length);
    expect(body.cpu_used_pct).toBeGreaterThanOrEqual(0);
    expect(body.cpu_used_pct).toBeLessThanOrEqual(100);
    expect(Math.abs(body.mem_total_mib - totalmem() / MiB)).toBeLessThanOrEqual(1);
    expect(body.mem_used_mib).toBeGreaterThan(0);
    expect(body.mem_used_mib).toBeLessThanOrEqual(body.mem_total_mib);

    const [size, used] = execFileSync('df', ['-B1', '--output=size,used', '/'], { encoding: 'utf8' }).trim().split('\n')[1]!.trim().split(/\s+/).map(Number);
    expect(body.disk_total_bytes).toBe(size);
    // Other processes write to the disk meanwhile: allow 1 %.
    expect(Math.abs(body.disk_used_bytes - used!)).toBeLessThan(size! / 100);

    expect(body.processes_tracked).toBe(server.app.envd.processes.size);
    // envd runs inside this test process here.
    expect(body.envd_rss_bytes).toBeGreaterThan(rssBytes() / 2);
    expect(body.envd_rss_bytes).toBeLessThan(rssBytes() * 2);
    expect(Math.abs(body.uptime_s - uptime())).toBeLessThan(5);
  });

  it('stays within 0–100 % when polled back to back, and leaks no file descriptor', async () => {
    server = await startServer({}, { setClock: async () => {} });
    await server.json('GET', '/metrics');
    const fds = countFds();
    for (let i = 0; i < 50; i++) {
      const { status, body } = await server.json('GET', '/metrics');
      expect(status).toBe(200);
      expect(body.cpu_used_pct).toBeGreaterThanOrEqual(0);
      expect(body.cpu_used_pct).toBeLessThanOrEqual(100);
    }
    expect(countFds()).toBeLessThanOrEqual(fds + 2);
  });
});

describe('parseProcStat', () => {
  it('counts busy and total ticks over user..steal, counting iowait as idle, and the per-CPU lines', () => {
    const text = [
      'cpu  100 5 50 800 40 3 2 0 7 0',
      'cpu0 50 2 25 400 20 1 1 0 3 0',
      'cpu1 50 3 25 400 20 2 1 0 4 0',
      'intr 12345',
      'ctxt 999',
    ].join('\n');
    // total = 100+5+50+800+40+3+2+0 = 1000; idle = 800 + 40; guest (7) is already inside user.
    expect(parseProcStat(text)).toEqual({ times: { busy: 160, total: 1000 }, cpuCount: 2 });
  });

  it('parses the real /proc/stat', async () => {
    const { readFileSync } = await import('node:fs');
    const { times, cpuCount } = parseProcStat(readFileSync('/proc/stat', 'utf8'));
    expect(cpuCount).toBe(cpus().length);
    expect(times.total).toBeGreaterThan(times.busy);
    expect(times.busy).toBeGreaterThan(0);
  });
});
