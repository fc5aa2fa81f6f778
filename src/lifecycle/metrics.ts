import type { Static } from '@sinclair/typebox';
import { readFile, statfs } from 'node:fs/promises';
import type { MetricsSchema } from './schemas.js';

export type Metrics = Static<typeof MetricsSchema>;

/**
 * CPU use is measured over windows of at least this many clock ticks per CPU
 * (USER_HZ is 100 on Linux: 10 ticks = 100 ms). Two calls closer than that
 * would see one or two ticks and report 0 or 100 %: the last figure is repeated instead.
 */
const MIN_WINDOW_TICKS_PER_CPU = 10;

interface CpuTimes {
  busy: number;
  total: number;
}

/**
 * Reads the guest's figures from /proc and statfs: a few small reads, no
 * sleeping, so the orchestrator can poll it every second. CPU use is the
 * busy share since the previous call (since boot on the first), kept per app.
 */
export class MetricsReader {
  #previous: CpuTimes = { busy: 0, total: 0 };
  #lastPct = 0;

  constructor(
    private readonly countTracked: () => number,
    private readonly keptOutput: () => { memory: number; spool: number },
    private readonly commands: () => CommandsFigures = () => ({ commands_mode: 'proc' }),
    private readonly clientMemory: () => number = () => 0,
  ) {}

  async read(): Promise<Metrics> {
    const [stat, meminfo, uptime, disk] = await Promise.all([
      readFile('/proc/stat', 'utf8'),
      readFile('/proc/meminfo', 'utf8'),
      readFile('/proc/uptime', 'utf8'),
      statfs('/'),
    ]);
    const { times, cpuCount } = parseProcStat(stat);
    const memTotalKib = meminfoKib(meminfo, 'MemTotal');
    const memAvailableKib = meminfoKib(meminfo, 'MemAvailable');
    return {
      cpu_count: cpuCount,
      cpu_used_pct: this.#cpuUsedPct(times, cpuCount),
      mem_total_mib: Math.round(memTotalKib / 1024),
      mem_used_mib: Math.round(Math.max(0, memTotalKib - memAvailableKib) / 1024),
      disk_total_bytes: disk.blocks * disk.bsize,
      disk_used_bytes: (disk.blocks - disk.bfree) * disk.bsize,
      processes_tracked: this.countTracked(),
      envd_rss_bytes: process.memoryUsage.rss(),
      ...keptOutputFigures(this.keptOutput()),
      client_memory_bytes: this.clientMemory(),
      uptime_s: Number(uptime.split(' ')[0]),
      ...this.commands(),
    };
  }

  #cpuUsedPct(now: CpuTimes, cpuCount: number): number {
    const total = now.total - this.#previous.total;
    if (total < MIN_WINDOW_TICKS_PER_CPU * cpuCount) return this.#lastPct;
    const busy = now.busy - this.#previous.busy;
    this.#previous = now;
    this.#lastPct = Math.round((1000 * Math.min(Math.max(busy, 0), total)) / total) / 10;
    return this.#lastPct;
  }
}

/** Aggregate CPU times (in ticks) and the number of per-CPU lines of /proc/stat. */
export function parseProcStat(text: string): { times: CpuTimes; cpuCount: number } {
  const lines = text.split('\n');
  // cpu  user nice system idle iowait irq softirq steal (guest time is already inside user and nice)
  const fields = (lines.find((line) => line.startsWith('cpu '))?.trim().split(/\s+/) ?? []).slice(1, 9).map(Number);
  const total = fields.reduce((sum, value) => sum + (Number.isFinite(value) ? value : 0), 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  const cpuCount = lines.filter((line) => /^cpu\d+ /.test(line)).length;
  return { times: { busy: total - idle, total }, cpuCount: Math.max(cpuCount, 1) };
}

function meminfoKib(text: string, key: string): number {
  const match = new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text);
  return match ? Number(match[1]) : 0;
}

/** How envd runs commands (cgroup or proc mode), and in cgroup mode what they all use together. */
export interface CommandsFigures {
  commands_mode: 'cgroup' | 'proc';
  commands_mode_reason?: string;
  commands_cpu_usec?: number;
  commands_memory_bytes?: number;
  commands_pids?: number;
}

function keptOutputFigures({ memory, spool }: { memory: number; spool: number }) {
  return { output_memory_bytes: memory, output_spool_bytes: spool };
}
