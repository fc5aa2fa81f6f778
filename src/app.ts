import { SessionRegistry } from './sessions/registry.js';
import { sessionRoutes } from './sessions/routes.js';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify';
import { bearerToken } from './auth.js';
import { commandRoutes } from './commands/routes.js';
import { readyRoutes } from './commands/ready-routes.js';
import { ServiceManager } from './services/manager.js';
import { serviceRoutes } from './services/routes.js';
import { openCgroups, systemLocation, type CgroupMode } from './cgroups/detect.js';
import { ProcessRegistry } from './commands/registry.js';
import type { Config } from './config.js';
import { errnoFailure, HttpError } from './errors.js';
import { MountGuard, requestPaths } from './files/mount-guard.js';
import { fileRoutes } from './files/routes.js';
import { loadSearchCalls } from './native/search-calls.js';
import type { ClockSetter } from './lifecycle/clock.js';
import type { OpenApiSource } from './lifecycle/openapi-source.js';
import { lifecycleRoutes } from './lifecycle/routes.js';
import { closeAfterLingering } from './lingering-close.js';
import { MemoryBudget, splitOf, type MemoryPart } from './memory-budget.js';
import { openPorts, type Ports } from './ports/open-ports.js';
import { portRoutes } from './ports/routes.js';
import { lazyRequestLogger } from './request-logger.js';
import type { Logger } from './logger.js';
import { SandboxState } from './sandbox-state.js';
import { machineAccess, type MachineOverrides } from './snapshot/machine.js';
import { snapshotRoutes } from './snapshot/routes.js';
import { SnapshotControl } from './snapshot/snapshot-control.js';
import { refuseStartsWhileFrozen } from './snapshot/start-guard.js';
import { buildLazySerializers } from './serialization.js';
import { runningUserName } from './users.js';
import { formatValidationError, validatorCompiler } from './validation.js';
import { checkNodeInternals } from './node-internals.js';
import { noteReceived, startTraceEnabled } from './commands/start-trace.js';

/** JSON request bodies above this are refused with 413 before they are parsed. */
export const JSON_BODY_LIMIT = 10 * 1024 * 1024;

/** Who may call a route: everyone (`/health`), the /init rule, or token holders (the default). */
export type RouteAuth = 'public' | 'init' | 'token';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: RouteAuth;
    /** What the route holds on behalf of its client while it runs, taken from the memory budget (src/memory-budget.ts). */
    memory?: { part: MemoryPart; bytes: number };
  }
}

export interface AppDeps {
  config: Config;
  logger: Logger;
  state?: SandboxState;
  /** Sets the system clock for POST /init; tests inject a fake so they never move the real clock. */
  setClock?: ClockSetter;
  /** GET /openapi.json: the document built into the bundle, or generated from the routes (tests, the build). */
  openApi: OpenApiSource;
  /** cgroup or proc mode; by default detected and set up on this machine (in-process tests pass proc mode, never touching the runner's cgroup). */
  cgroups?: CgroupMode;
  /** What envd holds for clients, bounded (tests pass a small one). */
  memoryBudget?: MemoryBudget;
  /** Snapshot and /init identity access to the machine: tests replace it, so they never freeze, sync or rename this machine's own. */
  machine?: MachineOverrides;
}

export type App = FastifyInstance & { envd: { state: SandboxState; processes: ProcessRegistry; memoryBudget: MemoryBudget; ports: Ports; services: ServiceManager } };

const REQUEST_ID = /^[\w.:-]{1,64}$/;

type ValidatorFactory = NonNullable<NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>['buildValidator']>;

export async function buildApp({ config, logger, state = new SandboxState(config, runningUserName()), setClock, openApi, cgroups, memoryBudget = new MemoryBudget(splitOf(config.clientMemoryBytes)), machine }: AppDeps): Promise<App> {
  // Which of Node's internals behave as envd assumes (node-internals.ts): checked while the rest starts up.
  const internals = checkNodeInternals({ logger });
  const app = Fastify({
    loggerInstance: logger,
    // One line per request, written by the onResponse hook below, instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: JSON_BODY_LIMIT,
    forceCloseConnections: true,
    return503OnClosing: true,
    requestIdHeader: false,
    // A request's logger makes its pino child only when it writes a line (src/request-logger.ts).
    childLoggerFactory: lazyRequestLogger,
    schemaErrorFormatter: formatValidationError,
    // Our own compilers, so fastify never loads its default @fastify/ajv-compiler. Fastify
    // calls our validatorCompiler with a route's schema; its type names ajv-compiler's own.
    schemaController: { compilersFactory: { buildValidator: (() => validatorCompiler) as unknown as ValidatorFactory, buildSerializer: buildLazySerializers } },
    // The control plane's request id, when it sends one, ties our log lines to its own.
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : looseUuid();
    },
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.setValidatorCompiler(validatorCompiler);
  app.setErrorHandler(handleError);
  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send({ message: `no route for ${request.method} ${request.url.split('?')[0]}` });
  });

  // Before the registry starts its spawner: envd moves itself into its own leaf first (src/cgroups/).
  const cgroupMode: CgroupMode =
    cgroups ?? (config.commandCgroups === 'off' ? { mode: 'proc', why: 'turned off (--command-cgroups off)' } : openCgroups(systemLocation(), config.reserveMemoryBytes));
  const processes = await ProcessRegistry.open(config, logger.child({ feature: 'commands' }), undefined, cgroupMode);
  if (cgroupMode.mode === 'cgroup') logger.info({ cgroup: cgroupMode.cgroups.commands }, 'commands run in a cgroup v2 each: limits, cgroup.kill, why each ended');
  else logger.info({ why: cgroupMode.why }, 'commands run without cgroups: no limits; kill walks /proc');
  app.addHook('onClose', async () => processes.killAll());
  // After adoption: a service finds its run among the re-adopted commands. Closed before the commands are
  // killed (preClose runs first), so a shutdown restarts nothing.
  const services = ServiceManager.open(config.stateDir, processes, state, logger.child({ feature: 'services' }));
  app.addHook('preClose', async () => services.close());
  // A port's service: the service whose current run is the command that holds it.
  const ports = openPorts(config, processes, logger.child({ feature: 'ports' }), (_pid, commandPid) => (commandPid === null ? null : services.serviceOfCommand(commandPid)));
  app.addHook('onClose', async () => ports.forwarder.close());

  // ENVD_START_TRACE: when each request was parsed, the first step of a command start's trace.
  if (startTraceEnabled) app.addHook('onRequest', async (request) => noteReceived(request.raw));
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    const auth = request.routeOptions.config.auth ?? 'token';
    // Unknown routes have no url and answer 404 whoever asks.
    if (auth === 'public' || request.routeOptions.url === undefined) return;
    if (auth === 'init' && !state.token.isSet) return;
    if (!state.token.isSet) throw new HttpError(401, 'envd is not initialised: no access token has been set (POST /init)');
    const token = bearerToken(request.headers.authorization);
    if (token === undefined) throw new HttpError(401, 'missing Authorization: Bearer <token> header');
    if (!state.token.matches(token)) throw new HttpError(401, 'invalid access token');
  });

  // Work that holds memory for its client takes it from the budget first: it waits while the
  // budget is spent, or is answered 503 "retry" (before anything starts), and gives it back when
  // its response is over, whether sent, cut by the client, or taken over by a stream.
  app.addHook('onRequest', async (request, reply) => {
    const memory = request.routeOptions.config.memory;
    if (!memory) return;
    const reservation = await memoryBudget.reserve(memory.part, memory.bytes);
    if (reply.raw.closed) reservation.release();
    else reply.raw.once('close', () => reservation.release());
  });

  // A file or command request on a hung network or FUSE mount is a 503 at its deadline, never a
  // thread-pool thread held for ever (src/files/mount-guard.ts).
  const mounts = new MountGuard(processes.holderPath);
  app.addHook('onClose', async () => mounts.close());
  app.addHook('preHandler', async (request) => mounts.check(`${request.method} ${request.routeOptions.url}`, requestPaths(request.query, request.body)));

  // An answer sent before the request body was read to its end (413, 401, a
  // refused or failed upload) closes the connection, lingering so that a
  // client or proxy still sending receives the answer instead of a reset.
  app.addHook('onSend', (request, reply, payload, done) => {
    if (!request.raw.complete) closeAfterLingering(request.raw, reply.raw);
    done(null, payload);
  });

  app.addHook('onResponse', async (request, reply) => {
    const level = request.routeOptions.config.auth === 'public' ? 'debug' : 'info';
    request.log[level]({ method: request.method, url: request.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
  });

  await openApi.attach(app);

  const access = machineAccess(cgroupMode, processes.holderPath, config.stateDir, logger, machine);
  const snapshot = new SnapshotControl(access.snapshot, logger.child({ feature: 'snapshot' }));
  app.addHook('onClose', async () => snapshot.close());
  app.addHook('preHandler', refuseStartsWhileFrozen(snapshot));
  await app.register(lifecycleRoutes, { config, state, processes, setClock, openApi, memoryBudget, snapshot, identity: access.identity, forwarder: ports.forwarder });
  await app.register(snapshotRoutes, { prefix: '/snapshot', snapshot });
  await app.register(commandRoutes, { prefix: '/commands', config, state, processes });
  const sessions = await SessionRegistry.open({ processes, state, stateDir: config.stateDir, idleTimeoutMs: config.sessionIdleTimeoutMs, logger: logger.child({ feature: 'sessions' }) });
  await app.register(sessionRoutes, { prefix: '/sessions', sessions, memoryBudget });
  await app.register(readyRoutes, { prefix: '/commands', processes, logger: processes.log });
  const searchCalls = loadSearchCalls(config.stateDir, logger.child({ feature: 'search' }));
  await app.register(fileRoutes, { prefix: '/files', config, state, receiver: processes.holderPath, searchCalls });
  await app.register(serviceRoutes, { prefix: '/services', config, processes, services });
  await app.register(portRoutes, { prefix: '/ports', table: ports.table });
  await internals;

  return Object.assign(app, { envd: { state, processes, memoryBudget, ports, services } }) as unknown as App;
}

function handleError(error: FastifyError | HttpError, request: FastifyRequest, reply: FastifyReply) {
  // The status line is gone (a stream failed after its first bytes): no error
  // body can follow it. Abort, so the client sees a short transfer.
  if (reply.raw.headersSent) {
    request.log.warn({ err: error }, 'failed after the answer started: aborting the connection');
    reply.raw.destroy();
    return;
  }
  // Whatever the route set for its own answer (octet-stream, a length, a range) does not describe an error body.
  for (const name of ['content-type', 'content-length', 'content-range', 'accept-ranges']) reply.removeHeader(name);
  reply.type('application/json; charset=utf-8');
  if (error instanceof HttpError) {
    if (error.status >= 500) request.log.error({ err: error.cause ?? error }, error.message);
    return reply.code(error.status).headers(error.headers).send({ ...error.fields, message: error.message });
  }
  // A failed system call no route mapped itself (EPERM from /sys, EROFS): mapped in the one place, src/errors.ts.
  const mapped = errnoFailure(error);
  if (mapped) return handleError(mapped, request, reply);
  const status = (error as FastifyError).statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    // Fastify answers an unsupported Content-Type with 415; the contract says 400.
    return reply.code(status === 415 ? 400 : status).send({ message: error.message });
  }
  request.log.error({ err: error }, 'unexpected error');
  return reply.code(500).send({ message: `internal error (request id ${request.id})` });
}

/**
 * Request ids in the layout of a version-4 UUID: a random prefix drawn once
 * per process (Math.random) and a counter in the last 12 hex digits. A
 * request id only has to tell requests apart in the logs; node:crypto's
 * randomUUID loaded that module with the first request (1.4 MiB of idle
 * RSS) for nothing secret, and a fresh random UUID per request cost the
 * HTTP floor ~5 %.
 */
const hex = (digits: number) => Math.floor(Math.random() * 16 ** digits).toString(16).padStart(digits, '0');
const REQUEST_ID_PREFIX = `${hex(8)}-${hex(4)}-4${hex(3)}-${(8 + Math.floor(Math.random() * 4)).toString(16)}${hex(3)}-`;
let requestCounter = Math.floor(Math.random() * 2 ** 40);

function looseUuid(): string {
  requestCounter = (requestCounter + 1) % 2 ** 48;
  return REQUEST_ID_PREFIX + requestCounter.toString(16).padStart(12, '0');
}
