import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { Logger } from '../logger.js';
import { join } from 'node:path';
import { validatorCompiler } from '../validation.js';
import { SERVICE_NAME, ServiceBody, type ServiceDefinition } from './schemas.js';

const NAME = new RegExp(SERVICE_NAME);

/**
 * A template's services: `<dir>/NAME.json`, each the body of PUT /services/NAME.
 * Files that cannot be used (not JSON, a body PUT would refuse, a bad name)
 * come back in `broken` with why; a missing directory is no services.
 */
export function readBootFiles(dir: string): { definitions: Map<string, ServiceDefinition>; broken: Map<string, string> } {
  const definitions = new Map<string, ServiceDefinition>();
  const broken = new Map<string, string>();
  let files: string[];
  try {
    files = readdirSync(dir).filter((file) => file.endsWith('.json')).sort();
  } catch {
    return { definitions, broken };
  }
  const validate = validatorCompiler({ schema: ServiceBody, httpPart: 'body', url: '', method: 'PUT' }) as unknown as ((data: unknown) => boolean) & { errors?: { instancePath: string; message?: string }[] | null };
  for (const file of files) {
    const name = file.slice(0, -'.json'.length);
    if (!NAME.test(name)) {
      broken.set(name, `${join(dir, file)}: the name must match ${SERVICE_NAME}`);
      continue;
    }
    try {
      const body: unknown = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      if (!validate(body)) {
        const first = validate.errors?.[0];
        throw new Error(`body${first?.instancePath ?? ''} ${first?.message ?? 'is invalid'}`);
      }
      definitions.set(name, body as ServiceDefinition);
    } catch (error) {
      broken.set(name, `${join(dir, file)}: ${(error as Error).message}`);
    }
  }
  return { definitions, broken };
}

/** Marks, in the state dir (tmpfs: cleared by a reboot), that this boot's envd has read the boot files. */
const BOOTED_MARK = 'services-booted';

/**
 * Reads the boot files once per boot: a restarted envd takes its services
 * back from the state directory instead (changed ones included).
 */
export function bootServicesOnce(dir: string, stateDir: string, manager: { boot(definitions: Map<string, ServiceDefinition>, broken: Map<string, string>): void }, log: Logger): void {
  const mark = join(stateDir, BOOTED_MARK);
  if (existsSync(mark)) return;
  const { definitions, broken } = readBootFiles(dir);
  if (definitions.size > 0 || broken.size > 0) log.info({ dir, services: [...definitions.keys()], broken: Object.fromEntries(broken) }, 'starting the services of the boot files');
  manager.boot(definitions, broken);
  writeFileSync(mark, `${new Date().toISOString()}\n`, { mode: 0o600 });
}
