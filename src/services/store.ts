import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ServiceDefinition, ServiceState } from './schemas.js';

/** What envd keeps of a service in its state directory (tmpfs: a restarted envd carries on, a reboot starts from the boot files). */
export interface StoredService {
  v: 1;
  definition: ServiceDefinition;
  /** Asked to run (PUT, start, restart, a boot file), not stopped since. */
  wanted: boolean;
  state: ServiceState;
  /** The current run: a tracked command, found again by pid and record id after a restart of envd. */
  run: { pid: number; id: string } | null;
  restarts: number;
  last_exit: { exit_code: number; signal: string | null; reason: string } | null;
  error: string | null;
}

/** One JSON file per service under `<state dir>/services`, each written whole (a temp file renamed over it). */
export class ServiceStore {
  readonly dir: string;

  constructor(stateDir: string) {
    this.dir = join(stateDir, 'services');
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
  }

  /** Writes a record (`JSON.stringify` of a StoredService) whole. */
  write(name: string, record: string): void {
    const path = join(this.dir, `${name}.json`);
    writeFileSync(`${path}.tmp`, record, { mode: 0o600 });
    renameSync(`${path}.tmp`, path);
  }

  remove(name: string): void {
    rmSync(join(this.dir, `${name}.json`), { force: true });
  }

  /** Every record a previous envd left; unreadable ones are reported by name and skipped. */
  readAll(): { records: Map<string, StoredService>; unreadable: string[] } {
    const records = new Map<string, StoredService>();
    const unreadable: string[] = [];
    for (const file of readdirSync(this.dir)) {
      if (!file.endsWith('.json')) continue;
      const name = file.slice(0, -'.json'.length);
      try {
        const record = JSON.parse(readFileSync(join(this.dir, file), 'utf8')) as StoredService;
        if (record.v !== 1 || typeof record.definition !== 'object') throw new Error('not a service record');
        records.set(name, record);
      } catch {
        unreadable.push(name);
      }
    }
    return { records, unreadable };
  }
}
