import { SerializerSelector, type SerializerFactory } from '@fastify/fast-json-stringify-compiler';

const buildSerializers = SerializerSelector();

/**
 * Fastify's own response serializers (fast-json-stringify, the same options),
 * each built on its route's first response instead of at start: building all
 * of them was the largest single cost of a boot (~25 ms, ~2 MiB), for routes a
 * sandbox may never call.
 */
export const buildLazySerializers: SerializerFactory = (externalSchemas, options) => {
  const compile = buildSerializers(externalSchemas, options);
  return (route) => {
    let serialize: ((data: unknown) => string) | undefined;
    return (data) => (serialize ??= compile(route))(data);
  };
};
