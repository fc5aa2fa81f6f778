import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ProcessRegistry } from '../commands/registry.js';
import type { Config } from '../config.js';
import type { SandboxState } from '../sandbox-state.js';
import { VERSION } from '../version.js';

export interface LifecycleRoutesOptions {
  config: Config;
  state: SandboxState;
  processes: ProcessRegistry;
}

const Health = Type.Object({ status: Type.Literal('ok'), version: Type.String() });

export const lifecycleRoutes: FastifyPluginAsyncTypebox<LifecycleRoutesOptions> = async (app) => {
  // Polled every few milliseconds during boot and resume: no disk, no process work.
  const health = { status: 'ok' as const, version: VERSION };
  app.get('/health', { config: { auth: 'public' }, schema: { summary: 'Liveness and version', security: [], response: { 200: Health } } }, async () => health);
};
