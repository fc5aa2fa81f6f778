import { Ajv, type Options, type ValidateFunction } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';
import type { FastifySchemaValidationError } from 'fastify/types/schema.js';

// validateSchema: false skips compiling ajv's draft-07 meta-schema (once per
// instance, ~70 ms of start-up) only to check envd's own TypeBox schemas,
// which the test suite exercises anyway.
const common: Options = { allErrors: false, useDefaults: true, removeAdditional: false, strict: false, validateSchema: false };

// Bodies are JSON and must already have the right types: `"timeout": "5"` is
// a client bug worth a 400, not a guess. Query strings and path params are
// text by nature, so those are coerced ("1" -> 1, "true" -> true).
// Made on the first request that needs one, like the validators: starting
// (and answering /health) then runs none of ajv (build.mjs loads it on first use).
let bodyAjv: Ajv | undefined;
let textAjv: Ajv | undefined;
const ajvFor = (httpPart: string | undefined): Ajv =>
  httpPart === 'body' ? (bodyAjv ??= new Ajv({ ...common, coerceTypes: false })) : (textAjv ??= new Ajv({ ...common, coerceTypes: 'array' }));

/**
 * Compiles each route's validator on its first request instead of at start:
 * compiling all of them cost ~20-40 ms of every boot (and ~2 MiB) for routes
 * a sandbox may never call. The first call of a route pays ~1 ms once.
 */
export const validatorCompiler: FastifySchemaCompiler<object> = ({ schema, httpPart }) => {
  let compiled: ValidateFunction | undefined;
  // Fastify reads `.errors` from the function it was given, after calling it.
  const validate = (data: unknown) => {
    compiled ??= ajvFor(httpPart).compile(schema);
    const valid = compiled(data);
    validate.errors = compiled.errors;
    return valid;
  };
  validate.errors = null as ValidateFunction['errors'];
  return validate;
};

/**
 * Names the offending field in every validation message, including the one
 * ajv leaves anonymous: `body must NOT have additional properties ("colour")`.
 */
export function formatValidationError(errors: FastifySchemaValidationError[], dataVar: string): Error {
  const first = errors[0];
  if (!first) return new Error(`${dataVar} is invalid`);
  const extra = first.params as { additionalProperty?: string };
  const named = first.keyword === 'additionalProperties' && extra.additionalProperty !== undefined ? ` (${JSON.stringify(extra.additionalProperty)})` : '';
  return new Error(`${dataVar}${first.instancePath} ${first.message ?? 'is invalid'}${named}`);
}
