import type { SwaggerTransform } from '@fastify/swagger';
import type { RouteAuth } from '../app.js';
import { errorResponse } from './schemas.js';

/**
 * Completes each route's entry in the OpenAPI document with what the app adds
 * to every route from the outside — the auth hook's 401, validation's 400, the
 * error handler's 500, all `{ message }` — and the security that the route's
 * `config.auth` really enforces. Only the document changes; routes that
 * declare one of these statuses themselves keep their own.
 */
export const describeRoute: SwaggerTransform = ({ schema, url, route }) => {
  const auth: RouteAuth = route.config?.auth ?? 'token';
  const given = (schema ?? {}) as Record<string, any>;
  const responses: Record<string, unknown> = { ...given.response };
  // Declaring only errors would hide fastify's implicit "200 Default Response": keep a success entry.
  if (!Object.keys(responses).some((status) => status.startsWith('2'))) responses['200'] = { description: 'Success (shape not declared by the route)' };
  const add = (status: string, description: string) => {
    if (!(status in responses)) responses[status] = errorResponse(description);
  };
  if (given.body || given.querystring || given.params) add('400', 'Invalid request; the message names the field');
  if (auth !== 'public') add('401', 'Missing or wrong token, or envd not initialised');
  add('500', 'Internal error; the message carries the request id and hides internals');

  // Errors are JSON even on routes that `produce` something else (raw downloads): say so per status,
  // otherwise the document would claim an octet-stream `{message}`.
  for (const [status, response] of Object.entries(responses)) {
    const value = response as Record<string, unknown>;
    if (/^[45]/.test(status) && value.content === undefined) {
      responses[status] = { description: value.description ?? 'Error', content: { 'application/json': { schema: value } } };
    }
  }

  const described: Record<string, unknown> = { ...given, response: responses };
  if (given.security === undefined) {
    // `{}` is OpenAPI's "no credentials": /init is open until the first token is set.
    if (auth === 'init') described.security = [{ bearer: [] }, {}];
    if (auth === 'public') described.security = [];
  }
  // A plugin's `/` route is registered as `/prefix` and `/prefix/`; the contract names the first.
  return { schema: described, url: url.length > 1 && url.endsWith('/') ? url.slice(0, -1) : url };
};
