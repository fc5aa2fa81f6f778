import { Ajv, type Options } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';

const common: Options = { allErrors: false, useDefaults: true, removeAdditional: false, strict: false };

// Bodies are JSON and must already have the right types: `"timeout": "5"` is
// a client bug worth a 400, not a guess. Query strings and path params are
// text by nature, so those are coerced ("1" -> 1, "true" -> true).
const bodyAjv = new Ajv({ ...common, coerceTypes: false });
const textAjv = new Ajv({ ...common, coerceTypes: 'array' });

export const validatorCompiler: FastifySchemaCompiler<object> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : textAjv;
  return ajv.compile(schema);
};
