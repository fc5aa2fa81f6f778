import { isDeepStrictEqual } from 'node:util';
import { prepareEntrypoint } from '../commands/entrypoint.js';
import { checkReadyCheck } from '../commands/ready-probes.js';
import type { ProcessRegistry } from '../commands/registry.js';
import { prepareCommand, type PreparedCommand } from '../commands/spawn.js';
import { badRequest, conflict, notFound } from '../errors.js';
import type { Logger } from '../logger.js';
import type { SandboxState } from '../sandbox-state.js';
import { dependencyOrder, findCycle, type DependencyGraph } from './graph.js';
import { MAX_SERVICES, type ServiceDefinition } from './schemas.js';
import { Service, type ServiceHost } from './service.js';
import { ServiceStore } from './store.js';

/** An image's USER as Docker takes it (`uid`, `uid:gid`, `name:group`): prepared the way the entrypoint is. */
const IMAGE_USER = /^\d+$|:/;

/**
 * Every service of the sandbox (issue 39 §4): defined by PUT /services/{name}
 * or a boot file, kept in envd's state directory, and found again (with their
 * running commands) by a restarted envd.
 */
export class ServiceManager {
  private readonly services = new Map<string, Service>();
  private readonly host: ServiceHost;
  /** What the store holds of each service, to skip writing it again unchanged. */
  private readonly written = new Map<string, string>();
  private closed = false;

  private constructor(
    private readonly processes: ProcessRegistry,
    private readonly state: SandboxState,
    private readonly store: ServiceStore,
    private readonly logger: Logger,
  ) {
    this.host = {
      processes,
      logger,
      prepare: (definition) => this.prepare(definition),
      dependencies: (service) => this.dependencies(service),
      changed: (service, stateMoved) => this.changed(service, stateMoved),
    };
  }

  /** Opens the store and takes back the services (and their runs) a previous envd left. */
  static open(stateDir: string, processes: ProcessRegistry, state: SandboxState, logger: Logger): ServiceManager {
    const manager = new ServiceManager(processes, state, new ServiceStore(stateDir), logger);
    manager.restore();
    return manager;
  }

  list(): Service[] {
    return [...this.services.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): Service {
    const service = this.services.get(name);
    if (!service) throw notFound(`no service named ${JSON.stringify(name)}`);
    return service;
  }

  /**
   * The one lookup GET /ports needs: the service whose current run is the
   * tracked command `commandPid`, or null.
   */
  serviceOfCommand(commandPid: number): string | null {
    for (const service of this.services.values()) if (service.run?.pid === commandPid && service.run.running) return service.name;
    return null;
  }

  /**
   * PUT: defines a service, or changes one (a running one restarts with the new
   * definition), and wants it up. Everything that would keep it from starting
   * (a missing dependency, a cycle, a bad check, an unknown user) is a 400 first.
   */
  async define(name: string, definition: ServiceDefinition): Promise<{ created: boolean; service: Service }> {
    const existing = this.services.get(name);
    if (!existing && this.services.size >= MAX_SERVICES) throw conflict(`at most ${MAX_SERVICES} services: delete one first`);
    for (const dependency of definition.depends_on ?? []) {
      if (dependency === name) throw badRequest(`body/depends_on: a service cannot depend on itself (${name})`);
      if (!this.services.has(dependency)) throw badRequest(`body/depends_on: no service named ${JSON.stringify(dependency)} (define it first)`);
    }
    const cycle = findCycle(this.graph(new Map([[name, definition.depends_on ?? []]])), name);
    if (cycle) throw badRequest(`body/depends_on: a dependency cycle: ${cycle.join(' → ')}`);
    checkReadyCheck(definition.ready, definition.ready_timeout_ms);
    await this.prepare(definition);
    if (existing) {
      const changed = !isDeepStrictEqual(existing.definition, definition);
      existing.definition = definition;
      if (changed && existing.wanted) await existing.stop();
      await existing.start();
      return { created: false, service: existing };
    }
    const service = new Service(name, definition, this.host);
    this.services.set(name, service);
    await service.start();
    return { created: true, service };
  }

  /** DELETE: stops it, forgets it and its last run. Services that depend on it stay as they are (waiting ones fail). */
  async remove(name: string): Promise<void> {
    const service = this.get(name);
    await service.stop();
    service.close();
    this.services.delete(name);
    this.written.delete(name);
    this.store.remove(name);
    if (service.run) await this.processes.forget(service.run.pid, service.run);
    for (const other of this.services.values()) other.dependencyChanged();
  }

  /**
   * Boot files (/etc/envd/services/NAME.json): each becomes a service, started
   * in dependency order. One that cannot start (a missing dependency, a cycle,
   * a bad file) is `failed` with its error, logged; the others start.
   */
  boot(definitions: Map<string, ServiceDefinition>, broken: Map<string, string>): void {
    const graph = this.graph(new Map([...definitions].map(([name, definition]) => [name, definition.depends_on ?? []])));
    const reasons = new Map(broken);
    for (const [name, definition] of definitions) {
      const missing = (definition.depends_on ?? []).filter((dependency) => !graph.has(dependency) && !reasons.has(dependency));
      if (missing.length > 0) reasons.set(name, `depends on ${missing.map((m) => JSON.stringify(m)).join(', ')}, which is not defined`);
      const cycle = findCycle(graph, name);
      if (cycle?.includes(name)) reasons.set(name, `a dependency cycle: ${cycle.join(' → ')}`);
    }
    for (const [name, error] of reasons) this.logger.error({ service: name, error }, 'a service of the boot files cannot start');
    for (const [name, definition] of definitions) {
      if (this.services.has(name)) continue; // a previous envd of this boot defined it (and maybe it was changed since)
      const service = new Service(name, definition, this.host);
      this.services.set(name, service);
    }
    for (const [name, error] of reasons) {
      const service = this.services.get(name);
      if (service && definitions.has(name)) service.fail(error);
    }
    // Dependencies first (a dependent started before its dependency would only wait for it).
    for (const name of dependencyOrder(graph)) if (definitions.has(name) && !reasons.has(name)) void this.services.get(name)?.start();
  }

  /** envd closes: no more restarts (a restart of envd leaves the runs to the next one; a shutdown kills them). */
  close(): void {
    this.closed = true;
    for (const service of this.services.values()) service.close();
  }

  private restore(): void {
    const { records, unreadable } = this.store.readAll();
    for (const name of unreadable) this.logger.error({ service: name }, 'the record of a service cannot be read: forgetting it');
    for (const name of unreadable) this.store.remove(name);
    for (const [name, record] of records) this.services.set(name, new Service(name, record.definition, this.host));
    for (const [name, record] of records) {
      const run = record.run ? this.processes.get(record.run.pid) : undefined;
      this.services.get(name)!.restore(record, run && run.id === record.run?.id ? run : undefined);
    }
    if (records.size > 0) this.logger.info({ services: records.size }, 'took back the services of a previous envd');
  }

  private prepare(definition: ServiceDefinition): Promise<PreparedCommand> {
    const { cmd, args, user, cwd, envs, limits } = definition;
    if (user !== undefined && IMAGE_USER.test(user)) return prepareEntrypoint(cmd, args, { user, cwd, envs, limits }, this.state);
    return prepareCommand({ cmd, args, user, cwd, envs, limits }, this.state);
  }

  private graph(extra: DependencyGraph): DependencyGraph {
    const graph = new Map<string, readonly string[]>([...this.services].map(([name, service]) => [name, service.definition.depends_on ?? []]));
    for (const [name, deps] of extra) graph.set(name, deps);
    return graph;
  }

  private dependencies(service: Service): ReturnType<ServiceHost['dependencies']> {
    const waitingFor: string[] = [];
    for (const name of service.definition.depends_on ?? []) {
      const dependency = this.services.get(name);
      if (!dependency) return { up: false, broken: `depends on ${JSON.stringify(name)}, which is not defined` };
      if (dependency.state === 'ready' || dependency.state === 'running') continue;
      if (dependency.state === 'failed' && !dependency.wanted && dependency.error !== null) {
        return { up: false, broken: `depends on ${JSON.stringify(name)}, which cannot start: ${dependency.error}` };
      }
      waitingFor.push(name);
    }
    return waitingFor.length === 0 ? { up: true } : { up: false, waitingFor };
  }

  private changed(service: Service, stateMoved: boolean): void {
    if (this.closed) return;
    if (this.services.get(service.name) === service) {
      try {
        // Written when something changed: waiting services look again at each move of another.
        const text = JSON.stringify(service.stored());
        if (this.written.get(service.name) !== text) this.store.write(service.name, text);
        this.written.set(service.name, text);
      } catch (error) {
        this.logger.error({ err: error, service: service.name }, 'could not record the state of a service');
      }
    }
    if (!stateMoved) return;
    // Those waiting for it look again: after this transition has finished (no nested transitions).
    queueMicrotask(() => {
      for (const other of this.services.values()) if (other !== service) other.dependencyChanged();
    });
  }
}
