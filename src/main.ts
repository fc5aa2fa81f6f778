import './process-title.js';
import { ConfigError, HELP, parseCli } from './config.js';
import { runShell } from './shell/client.js';
import { parseShellArgs, SHELL_HELP, ShellUsageError } from './shell/options.js';
import { VERSION } from './version.js';

/** The OpenAPI document as JSON text, generated from the route schemas by build.mjs (esbuild `define`). */
declare const ENVD_OPENAPI_JSON: string;

/** How long SIGTERM may take before envd exits regardless. */
const SHUTDOWN_DEADLINE_MS = 5_000;

/** The client verbs (src/cli): they load neither fastify nor pino, so they start fast. */
const CLIENT_VERBS = new Set(['exec', 'ps', 'attach', 'logs', 'kill', 'cat', 'ls', 'cp', 'watch', 'grep', 'find', 'snapshot', 'ports', 'session', 'services', 'completion']);

async function main(): Promise<void> {
  const verb = process.argv[2];
  if (verb === 'shell') return shell(process.argv.slice(3));
  if (verb !== undefined && CLIENT_VERBS.has(verb)) {
    const { exitQuietlyOnClosedPipe, runCli } = await import('./cli/main.js');
    exitQuietlyOnClosedPipe();
    process.exitCode = await runCli(verb, process.argv.slice(3));
    return;
  }
  // The daemon takes options only: a word is a verb, and a mistyped one is said so (not "Unexpected argument").
  if (verb !== undefined && !verb.startsWith('-')) {
    const { closestVerb } = await import('./cli/main.js');
    const near = closestVerb(verb);
    process.stderr.write(`envd: unknown verb ${JSON.stringify(verb)}${near ? `, did you mean ${near}?` : ''} (envd --help lists the verbs)\n`);
    process.exit(2);
  }
  let action;
  try {
    action = parseCli(process.argv.slice(2), process.env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`envd: ${error.problems.join('\nenvd: ')}\nRun envd --help for the options.\n`);
    process.exit(2);
  }
  if (action.kind === 'help') {
    const { CLI_HELP } = await import('./cli/main.js');
    return void process.stdout.write(`${CLI_HELP}\n${HELP}`);
  }
  if (action.kind === 'version') return void process.stdout.write(`${VERSION}\n`);

  const { config } = action;
  // Read once into the config; no child may inherit it.
  delete process.env.ENVD_ACCESS_TOKEN;

  // Loaded here, not at the top: the client verbs must not pay for fastify and pino.
  const [{ buildApp }, { prebuiltOpenApi }, { createLogger }, { checkNodeInternals }, { startMemoryReclaim }, { mallocTrimmer, fileBatchCalls }, { useFileBatches }, { paceCollectorForTransfers }, { startEntrypoint }, { warnIfStateDirNotTmpfs }] = await Promise.all([
    import('./app.js'),
    import('./lifecycle/openapi-source.js'),
    import('./logger.js'),
    import('./node-internals.js'),
    import('./memory-reclaim.js'),
    import('./native/malloc-trim.js'),
    import('./files/tar/file-batch.js'),
    import('./gc-pacing.js'),
    import('./commands/entrypoint.js'),
    import('./lifecycle/state-dir-check.js'),
  ]);
  const logger = createLogger(config.logLevel);
  // ENVD_DISTRUST_NODE_INTERNALS names Node internals to do without (docs/operations.md); buildApp awaits the checks.
  void checkNodeInternals({ logger, distrust: process.env.ENVD_DISTRUST_NODE_INTERNALS });
  const app = await buildApp({ config, logger, openApi: prebuiltOpenApi(ENVD_OPENAPI_JSON) });

  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    if (signal === 'SIGHUP') {
      // A restart (the guest's unit stops envd with SIGHUP): commands and their holders live on for the next envd.
      logger.info({ signal }, 'exiting for a restart: closing the listener, leaving commands running for the next envd');
      app.envd.processes.detach();
    } else {
      logger.info({ signal }, 'shutting down: closing the listener and killing started process groups');
    }
    setTimeout(() => process.exit(0), SHUTDOWN_DEADLINE_MS).unref();
    app.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.on('SIGHUP', stop);

  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    logger.fatal({ err: error }, 'cannot listen');
    process.exit(1);
  }
  startMemoryReclaim(mallocTrimmer(config.stateDir, logger));
  useFileBatches(fileBatchCalls(config.stateDir, logger));
  paceCollectorForTransfers();
  if (process.env.ENVD_LATENCY_PROBE) (await import('./latency-probe.js')).startLatencyProbe();
  warnIfStateDirNotTmpfs(config.stateDir, logger);
  const { bootServicesOnce } = await import('./services/boot-files.js');
  bootServicesOnce(config.servicesDir, config.stateDir, app.envd.services, logger.child({ feature: 'services' }));
  if (config.entrypointFile) await startEntrypoint(config.entrypointFile, config.stateDir, app.envd.state, app.envd.processes, logger.child({ feature: 'entrypoint' }));
  logger.info({ version: VERSION, host: config.host, port: config.port, initialised: app.envd.state.token.isSet }, 'envd ready');
}

/** `envd shell …`: the same executable as a terminal client of an envd. */
async function shell(argv: string[]): Promise<void> {
  let options;
  try {
    options = parseShellArgs(argv, process.env);
  } catch (error) {
    if (!(error instanceof ShellUsageError)) throw error;
    process.stderr.write(`envd shell: ${error.message}\nRun envd shell --help for the options.\n`);
    process.exit(2);
  }
  if (!options) return void process.stdout.write(SHELL_HELP);
  try {
    process.exit(await runShell(options));
  } catch (error) {
    // fetch says only "fetch failed"; the reason (ECONNREFUSED, a DNS error) is its cause.
    const cause = (error as { cause?: { message?: string } }).cause?.message;
    const why = cause ? `cannot reach envd at ${options.url}: ${cause}` : (error as Error).message;
    process.stderr.write(`envd shell: ${why}\n`);
    process.exit(1);
  }
}

void main();
