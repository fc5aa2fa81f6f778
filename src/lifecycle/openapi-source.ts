import type { FastifyInstance } from 'fastify';

// Any app: envd's is typed with its logger and type provider.
type AnyApp = FastifyInstance<any, any, any, any, any>;

/**
 * Where GET /openapi.json gets its document. The bundle serves the text that
 * build.mjs generated from these same route schemas (so @fastify/swagger and
 * `yaml` are not loaded at every start); tests and the build itself generate
 * it from the routes as they register (./openapi.ts).
 */
export interface OpenApiSource {
  /** Runs before any route is registered (a generator must see every route). */
  attach(app: AnyApp): Promise<void>;
  /** The document as JSON text; called after the app is ready. */
  json(app: AnyApp): string;
}

/** The document generated at build time, served as it is. */
export function prebuiltOpenApi(json: string): OpenApiSource {
  return { attach: async () => {}, json: () => json };
}
