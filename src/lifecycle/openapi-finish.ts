import { ErrorSchema } from '../errors.js';
import { extractComponents } from './openapi-components.js';
import { OPERATIONS, STATUS_TEXT, TAGS, type OperationDoc, type ResponseHeader } from './openapi-operations.js';

type JsonObject = Record<string, any>;

/** @fastify/swagger says "Default Response" for a success the route does not describe. */
const SUCCESS_TEXT: Record<string, string> = { '200': 'Success', '206': 'Partial content: the range asked for (Content-Range)' };

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

/** How a server-sent-event stream is framed: the same for every stream route (docs/api.md, "Events"). */
const EVENT_STREAM_TEXT =
  'Server-sent events (text/event-stream). Each event is an `event:` line naming it and one `data:` line of JSON; ' +
  '`x-events` maps each event name to the schema of its data. Lines starting with `:` are keep-alives (every 15 s). ';

/**
 * Completes the document @fastify/swagger generated (with describeRoute) into
 * one a client generator can use: servers, tags, operationIds, every status,
 * headers, binary bodies, event streams (src/lifecycle/openapi-operations.ts),
 * then named components in place of the inlined copies.
 */
export function finishDocument(document: JsonObject): JsonObject {
  document.servers = [{ url: '/', description: 'envd itself (port 49983 in a sandbox), or a proxy\'s prefix in front of it' }];
  document.tags = TAGS;
  for (const [path, methods] of Object.entries(document.paths as Record<string, JsonObject>)) {
    for (const [method, operation] of Object.entries(methods)) {
      if (!METHODS.includes(method)) continue;
      const doc = OPERATIONS[`${method.toUpperCase()} ${path}`];
      if (doc) describeOperation(operation, doc);
      describeErrors(operation, doc);
      describeBinary(operation);
      for (const [status, response] of Object.entries(operation.responses as JsonObject)) {
        if (response.description === 'Default Response') response.description = SUCCESS_TEXT[status] ?? 'Success';
      }
    }
  }
  extractComponents(document);
  return document;
}

function describeOperation(operation: JsonObject, doc: OperationDoc): void {
  operation.operationId = doc.operationId;
  operation.tags = [doc.tag];
  if (doc.headers) {
    operation.parameters = [
      ...(operation.parameters ?? []),
      ...doc.headers.map(({ name, description }) => ({ in: 'header', name, required: false, description, schema: { type: name === 'Content-Length' ? 'integer' : 'string' } })),
    ];
  }
  for (const [status, headers] of Object.entries(doc.responseHeaders ?? {})) {
    if (Number(status) >= 400) continue; // describeErrors sets those
    const response = operation.responses[status];
    if (!response) throw new Error(`OpenAPI: ${doc.operationId} gives headers for ${status}, which it does not answer`);
    response.headers = headerObjects(headers);
  }
  if (doc.events) {
    // A route that also answers JSON without streaming (GET /services/{name}/logs) keeps that content.
    const others = Object.entries((operation.responses['200']?.content ?? {}) as JsonObject).filter(([type]) => type !== 'text/event-stream');
    operation.responses['200'] = {
      description: doc.events.success,
      content: { ...Object.fromEntries(others), 'text/event-stream': { schema: { type: 'string', description: EVENT_STREAM_TEXT + doc.events.framing }, 'x-events': doc.events.data } },
    };
  }
}

/** Every error status as `{message}` with what it means; a `4XX`/`5XX` catch-all is replaced by the route's listed statuses. */
function describeErrors(operation: JsonObject, doc: OperationDoc | undefined): void {
  const responses = operation.responses as JsonObject;
  for (const range of ['4XX', '5XX', '4xx', '5xx']) delete responses[range];
  for (const status of [...(doc?.errors ?? []), 503]) responses[status] ??= {};
  for (const [status, response] of Object.entries(responses)) {
    if (!/^[45]\d\d$/.test(status)) continue;
    const text = STATUS_TEXT[Number(status)];
    const description = response.description === undefined || response.description === ErrorSchema.description ? text : response.description;
    responses[status] = { description: description ?? 'Error', content: { 'application/json': { schema: ErrorSchema } } };
  }
  for (const [status, headers] of Object.entries(doc?.responseHeaders ?? {})) {
    if (Number(status) < 400) continue;
    responses[status].headers = headerObjects(headers);
  }
  operation.responses = Object.fromEntries(Object.entries(responses).sort(([a], [b]) => a.localeCompare(b)));
}

function headerObjects(headers: readonly ResponseHeader[]): JsonObject {
  return Object.fromEntries(headers.map(({ name, description, type = 'string' }) => [name, { description, schema: { type } }]));
}

/** Bytes are bytes: `format: binary` wherever the body is not JSON or events (uploads, downloads, archives, output). */
function describeBinary(operation: JsonObject): void {
  const contents = [operation.requestBody?.content, ...Object.values(operation.responses as JsonObject).map((response) => response.content)];
  for (const content of contents) {
    for (const [type, media] of Object.entries((content ?? {}) as JsonObject)) {
      if (type.includes('json') || type === 'text/event-stream') continue;
      media.schema = { type: 'string', format: 'binary', ...(media.schema?.description ? { description: media.schema.description } : {}) };
    }
  }
}
