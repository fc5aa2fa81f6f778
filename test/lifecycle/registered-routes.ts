import type { FastifyInstance } from 'fastify';

export interface RegisteredRoute {
  method: string;
  /** In OpenAPI form: `/commands/{pid}/wait`, no trailing slash. */
  path: string;
}

/**
 * Every route a built app answers, read from fastify's own router
 * (`printRoutes`), independent of @fastify/swagger. HEAD routes that fastify
 * adds beside each GET are left out, as the document leaves them out; a HEAD
 * route declared on its own is kept.
 */
export function registeredRoutes(app: FastifyInstance): RegisteredRoute[] {
  const tree = app.printRoutes({ commonPrefix: false });
  const parents: string[] = [];
  const found = new Map<string, Set<string>>();
  for (const line of tree.split('\n')) {
    const match = /^((?:│ {3}| {4})*)(?:├── |└── )(.*?)(?: \(([^)]*)\))?$/.exec(line);
    if (!match) continue;
    const depth = match[1]!.length / 4;
    const full = (depth > 0 ? parents[depth - 1]! : '') + match[2]!;
    parents[depth] = full;
    parents.length = depth + 1;
    if (!match[3]) continue;
    const path = toOpenApiPath(full);
    const methods = found.get(path) ?? new Set<string>();
    for (const method of match[3].split(',').map((m) => m.trim())) methods.add(method);
    found.set(path, methods);
  }
  const routes: RegisteredRoute[] = [];
  for (const [path, methods] of found) {
    for (const method of methods) {
      if (method === 'HEAD' && methods.has('GET')) continue;
      routes.push({ method, path });
    }
  }
  return routes;
}

function toOpenApiPath(path: string): string {
  // A plugin's `/` route is also registered as `/prefix/`; both are one operation.
  const trimmed = path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
  return trimmed.replace(/:(\w+)/g, '{$1}');
}

/** Registered routes that the OpenAPI document does not describe, as `METHOD /path`. */
export function missingFromDocument(app: FastifyInstance, document: { paths: Record<string, Record<string, unknown>> }): string[] {
  return registeredRoutes(app)
    .filter(({ method, path }) => document.paths[path]?.[method.toLowerCase()] === undefined)
    .map(({ method, path }) => `${method} ${path}`);
}
