import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { bearerClient } from './bearer-client.js';
import { buildApp, type App, type AppDeps } from '../../src/app.js';
import { useFileBatches } from '../../src/files/tar/file-batch.js';
import { fileBatchCalls } from '../../src/native/malloc-trim.js';
import { DEFAULT_KEEP_FINISHED_SECONDS, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_SPOOL_BYTES, DEFAULT_OUTPUT_MEMORY_BYTES, type Config } from '../../src/config.js';
import { MEMORY_BUDGET_BYTES } from '../../src/memory-budget.js';
import { generatedOpenApi } from '../../src/lifecycle/openapi.js';
import { createLogger } from '../../src/logger.js';

export interface TestServer {
  url: string;
  token: string;
  app: App;
  /** Every log line envd wrote, for checks that no token leaks. */
  logs: string[];
  /** fetch with the token; JSON bodies are serialised. */
  call(method: string, path: string, body?: unknown, init?: RequestInit): Promise<Response>;
  /** call() and parse the JSON answer. */
  json<T = any>(method: string, path: string, body?: unknown, init?: RequestInit): Promise<{ status: number; body: T }>;
  /** Stops envd (killing its commands) and removes its state and spool directories unless the test gave them. */
  close(): Promise<void>;
  /** Stops envd as a restart would: commands keep running with their holders, state stays for the next envd. */
  detach(): Promise<void>;
}

export function testConfig(overrides: Partial<Config> = {}): Config {
  return {
    host: '127.0.0.1',
    port: 0,
    accessToken: undefined,
    accessTokenFile: undefined,
    defaultUser: undefined,
    defaultWorkdir: undefined,
    maxOutputBytes: DEFAULT_MAX_OUTPUT_BYTES,
    outputMemoryBytes: DEFAULT_OUTPUT_MEMORY_BYTES,
    clientMemoryBytes: MEMORY_BUDGET_BYTES,
    maxSpoolBytes: DEFAULT_MAX_SPOOL_BYTES,
    // Placeholders that cannot be created (under a file): startServer gives every server its own
    // temporary directories, and an app built from testConfig() alone fails instead of writing real paths.
    stateDir: '/dev/null/state',
    servicesDir: '/dev/null/services',
    spoolDir: '/dev/null/spool',
    directOutput: true,
    keepFinishedMs: DEFAULT_KEEP_FINISHED_SECONDS * 1000,
    keepCollectedMs: 0,
    sessionIdleTimeoutMs: 0,
    entrypointFile: undefined,
    reserveMemoryBytes: 128 * 1024 * 1024,
    commandCgroups: 'auto',
    // An in-process test envd must not make the runner's loopback listeners (other tests', other users') reachable elsewhere.
    forwardLoopback: false,
    forwardAddresses: undefined,
    forwardSteering: true,
    logLevel: 'info',
    ...overrides,
  };
}

/** A temporary directory with `state/` and `spool/` for one envd (or for several in turn, across a restart). */
export function makeEnvdDirs(): { root: string; stateDir: string; spoolDir: string; remove(): void } {
  const root = mkdtempSync(join(tmpdir(), 'envd-dirs-'));
  return { root, stateDir: join(root, 'state'), spoolDir: join(root, 'spool'), remove: () => rmSync(root, { recursive: true, force: true }) };
}

/**
 * What an in-process server may do to the machine unless a test gives its own:
 * nothing. Snapshot and identity jobs fail, knobs and identity files are paths
 * that cannot exist, no filesystem is frozen: a test never syncs, drops the
 * caches of, freezes, renames or reseeds this shared machine by accident.
 */
const refuse = async (args: readonly string[]) => {
  throw new Error(`envd-holder ${args.join(' ')}: refused in an in-process test (inject machine.*.job)`);
};
const NO_MACHINE: Required<Pick<NonNullable<AppDeps['machine']>, 'snapshot' | 'identity'>> = {
  snapshot: {
    job: refuse,
    memory: { dropCaches: '/dev/null/drop_caches', compactMemory: '/dev/null/compact_memory', meminfo: '/dev/null/meminfo' },
    mounts: async () => [],
  },
  identity: {
    job: refuse,
    files: { hostname: '/dev/null/hostname', machineId: '/dev/null/machine-id', trustStores: [], newTrustStore: '/dev/null/ca-certificates.crt' },
    reseed: () => false,
  },
};

/** A real envd listening on 127.0.0.1 on a free port, in this process. `deps` injects e.g. a fake clock setter. */
export async function startServer(overrides: Partial<Config> = {}, deps: Pick<AppDeps, 'setClock' | 'cgroups' | 'memoryBudget' | 'machine'> = {}): Promise<TestServer> {
  const token = 'accessToken' in overrides ? overrides.accessToken : randomBytes(16).toString('hex');
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  const dirs = overrides.stateDir === undefined ? makeEnvdDirs() : undefined;
  const config = testConfig({ ...(dirs ? { stateDir: dirs.stateDir, spoolDir: dirs.spoolDir } : {}), ...overrides, accessToken: token });
  // As main.ts does: the archive download's batched file calls from the addon (dist/, built by npm test first).
  useFileBatches(fileBatchCalls(config.stateDir, createLogger('silent', sink)));
  let app: App;
  try {
    app = await buildApp({
      cgroups: { mode: 'proc', why: 'an in-process test server leaves the runner\'s cgroup alone' },
      ...deps,
      machine: { snapshot: { ...NO_MACHINE.snapshot, ...deps.machine?.snapshot }, identity: { ...NO_MACHINE.identity, ...deps.machine?.identity } },
      config,
      logger: createLogger(config.logLevel, sink),
      openApi: generatedOpenApi,
    });
  } catch (error) {
    // No server (no build yet, say): its directories go too, or they are left in /tmp for good.
    dirs?.remove();
    throw error;
  }
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  const url = `http://127.0.0.1:${address.port}`;

  const { call, json } = bearerClient(url, token);
  const close = async () => {
    await app.close();
    dirs?.remove();
  };
  const detach = async () => {
    app.envd.processes.detach();
    await app.close();
  };
  return { url, token: token ?? '', app, logs, call, json, close, detach };
}
