import type { FastifyPluginAsync } from 'fastify';
import type { Config } from '../config.js';
import type { SandboxState } from '../sandbox-state.js';

export interface FileRoutesOptions {
  config: Config;
  state: SandboxState;
}

export const fileRoutes: FastifyPluginAsync<FileRoutesOptions> = async () => {};
