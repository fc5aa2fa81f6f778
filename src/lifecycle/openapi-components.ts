/**
 * Turns every schema with a `title` in an OpenAPI document into one named
 * `components.schemas` entry and `$ref`s to it. The shared schema modules
 * (src/{commands,files,lifecycle}/schemas.ts, src/errors.ts) name their
 * schemas with `title`; @fastify/swagger inlines them at every use (the error
 * shape 140 times), and a generated client then has no types to import.
 *
 * A use that only changes the description (`{ ...Limits, description }`) is
 * `allOf: [$ref]` with its own description; two different schemas under one
 * title are a mistake, and fail the build here.
 */
type Json = unknown;
type JsonObject = Record<string, Json>;

const isObject = (value: Json): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

export function extractComponents(document: JsonObject): void {
  const components = (document.components ??= {}) as JsonObject;
  const schemas = (components.schemas ??= {}) as Record<string, JsonObject>;
  const named = new Map<string, { schema: JsonObject; text: string }>();

  const visit = (node: Json): Json => {
    if (Array.isArray(node)) return node.map(visit);
    if (!isObject(node)) return node;
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(node)) out[key] = visit(value);
    // OpenAPI 3.0 has no `const` (TypeBox's literals): @fastify/swagger rewrites the routes' own, not the events'.
    if ('const' in out) {
      out.enum = [out.const];
      delete out.const;
    }
    const title = out.title;
    if (typeof title !== 'string') return out;

    const { description, ...shape } = out;
    const text = JSON.stringify(shape);
    const seen = named.get(title);
    if (!seen) named.set(title, { schema: out, text });
    else if (seen.text !== text) throw new Error(`OpenAPI: two different schemas are both titled ${JSON.stringify(title)}:\n${seen.text}\n${text}`);
    const ref = { $ref: `#/components/schemas/${title}` };
    const canonical = named.get(title)!.schema.description;
    return description === undefined || description === canonical ? ref : { allOf: [ref], description };
  };

  document.paths = visit(document.paths);
  for (const [name, { schema }] of named) {
    const { title: _title, ...rest } = schema;
    schemas[name] = rest;
  }
  moveRequestBodies(document, components, schemas);
}

/**
 * A JSON body titled `...Request` becomes a `components.requestBodies` entry: generators read a
 * field with a `default` as always present in a schema, but as optional in a request body.
 */
function moveRequestBodies(document: JsonObject, components: JsonObject, schemas: Record<string, JsonObject>): void {
  const bodies = (components.requestBodies ??= {}) as Record<string, JsonObject>;
  for (const methods of Object.values(document.paths as Record<string, Record<string, JsonObject>>)) {
    for (const operation of Object.values(methods)) {
      const body = operation.requestBody as JsonObject | undefined;
      const media = (body?.content as Record<string, JsonObject> | undefined)?.['application/json'];
      const name = /^#\/components\/schemas\/(\w+Request)$/.exec(String((media?.schema as JsonObject | undefined)?.$ref ?? ''))?.[1];
      if (!body || !media || !name) continue;
      // Other content types of the same body (a raw alternative) stay with it.
      bodies[name] ??= { ...body, content: { ...(body.content as JsonObject), 'application/json': { ...media, schema: schemas[name] } } };
      operation.requestBody = { $ref: `#/components/requestBodies/${name}` };
    }
  }
  for (const name of Object.keys(bodies)) delete schemas[name];
}
