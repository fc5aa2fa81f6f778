import { Type, type Static } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ProcessRegistry } from '../commands/registry.js';
import type { Config } from '../config.js';
import type { SandboxState } from '../sandbox-state.js';
import { VERSION } from '../version.js';
import { ClockSync, systemClockSetter, type ClockSetter } from './clock.js';
import { applyInit, validateInit } from './init.js';
import { callIdentity, stageIdentity, type IdentityMachine } from './identity.js';
import type { SnapshotControl } from '../snapshot/snapshot-control.js';
import { MetricsReader } from './metrics.js';
import type { OpenApiSource } from './openapi-source.js';
import { TokenFile } from './token-file.js';
import { EnvsSchema, HealthSchema, InitBody, MetricsSchema, OpenApiSchema } from './schemas.js';
import type { MemoryBudget } from '../memory-budget.js';
import type { LoopbackForwarder } from '../ports/loopback-forward.js';

export interface LifecycleRoutesOptions {
  config: Config;
  state: SandboxState;
  processes: ProcessRegistry;
  /** Sets the system clock on /init; the real `date -s` unless a test injects its own. */
  setClock?: ClockSetter;
  openApi: OpenApiSource;
  /** What envd holds for clients: /metrics shows how much is taken. */
  memoryBudget?: MemoryBudget;
  /** /init thaws what /snapshot/prepare froze. */
  snapshot: SnapshotControl;
  /** What /init's entropy, hostname, machine_id and ca_bundle write and call. */
  identity: IdentityMachine;
  /** /init's forward_loopback switches it. */
  forwarder?: Pick<LoopbackForwarder, 'enable'>;
}

export const lifecycleRoutes: FastifyPluginAsyncTypebox<LifecycleRoutesOptions> = async (app, { config, state, processes, setClock = systemClockSetter(processes.holderPath), openApi, memoryBudget, snapshot, identity, forwarder }) => {
  const log = app.log.child({ feature: 'lifecycle' });
  const clock = new ClockSync(setClock, log);
  const metrics = new MetricsReader(
    () => processes.size,
    () => processes.usage(),
    () => processes.commandsFigures(),
    () => memoryBudget?.usage().total ?? 0,
  );
  const tokenFile = config.accessTokenFile === undefined ? undefined : new TokenFile(config.accessTokenFile, log);

  // Polled every few milliseconds during boot and resume: no disk, no process work.
  // Sent as ready-made JSON text (fastify sends a string as it is): the first
  // answer of every boot then builds no serializer (docs/performance.md).
  type Health = Static<typeof HealthSchema>;
  const health = JSON.stringify({ status: 'ok', version: VERSION } satisfies Health);
  app.get('/health', { config: { auth: 'public' }, schema: { summary: 'Liveness and version', security: [], response: { 200: HealthSchema } } }, (_request, reply) => {
    // The text is the schema's JSON; the type provider only knows the object form.
    reply.type('application/json; charset=utf-8').send(health as unknown as Health);
  });

  app.post(
    '/init',
    {
      config: { auth: 'init' },
      // A call with no body at all means "change nothing" (e.g. only to check the token), like `{}`.
      preValidation: async (request) => {
        if (request.body === undefined) request.body = {};
      },
      schema: {
        summary: 'Set the token, sandbox envs, defaults and clock (create, resume, restore, fork)',
        description: 'Open while no token is set; afterwards it needs the current token. Idempotent. All fields are checked before any is applied.',
        body: InitBody,
        response: { 204: Type.Null({ description: 'Applied' }) },
      },
    },
    async (request, reply) => {
      const plan = await validateInit(request.body, processes.limitsRefused());
      // After a filesystem-only snapshot the disks may still be frozen: the identity files below would wait on them.
      await snapshot.thawFilesystems();
      const staged = await stageIdentity(plan.identity, identity.files);
      // From here to the end of this block nothing awaits: the whole plan lands at once.
      applyInit(state, plan);
      const trustStoreEnvs = staged.commit();
      if (trustStoreEnvs !== undefined) state.trustStoreEnvs = trustStoreEnvs;
      if (plan.forwardLoopback !== undefined) forwarder?.enable(plan.forwardLoopback);
      const sync = plan.timestampMs === undefined ? undefined : clock.sync(plan.timestampMs);
      log.info(
        {
          token: plan.accessToken === undefined ? 'kept' : 'replaced',
          envs: plan.envs === undefined ? 'kept' : Object.keys(plan.envs).length,
          defaultUser: state.defaultUser,
          defaultWorkdir: state.defaultWorkdir,
          clock: sync?.decision,
          identity: Object.keys(plan.identity),
        },
        'initialised',
      );
      // Answer once the clock is right and the token file holds the new token, so
      // the orchestrator's next call sees the corrected time and survives a restart.
      await Promise.all([sync?.done, plan.accessToken === undefined ? undefined : tokenFile?.save(plan.accessToken), callIdentity(plan.identity, identity, log)]);
      // Only now, with the clock right and the fork its own, do frozen commands run again.
      await snapshot.thaw('init');
      return reply.code(204).send(null);
    },
  );

  app.get('/envs', { schema: { summary: 'The sandbox envs set by /init (never the token)', response: { 200: EnvsSchema } } }, async () => state.envs);

  app.get('/metrics', { schema: { summary: 'CPU, memory, disk and envd figures', response: { 200: MetricsSchema } } }, async () => metrics.read());

  let openApiJson: string | undefined;
  app.get('/openapi.json', { schema: { summary: 'This API as an OpenAPI 3 document, generated from the route schemas', response: { 200: OpenApiSchema } } }, async (_request, reply) =>
    // JSON text with a JSON content type: fastify sends it as it is, unserialised.
    reply.type('application/json').send((openApiJson ??= openApi.json(app)) as unknown as Static<typeof OpenApiSchema>),
  );
};
