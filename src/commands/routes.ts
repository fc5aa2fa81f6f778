import type { FastifyPluginAsync } from 'fastify';
import type { Config } from '../config.js';
import type { SandboxState } from '../sandbox-state.js';
import type { ProcessRegistry } from './registry.js';

export interface CommandRoutesOptions {
  config: Config;
  state: SandboxState;
  processes: ProcessRegistry;
}

// Placeholder until the command group lands: only the listing.
export const commandRoutes: FastifyPluginAsync<CommandRoutesOptions> = async (app) => {
  app.get('/', async () => ({ processes: [] }));
};
