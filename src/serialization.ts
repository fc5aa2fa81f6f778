import { SerializerSelector, type SerializerFactory } from '@fastify/fast-json-stringify-compiler';

/**
 * Fastify's own response serializers (fast-json-stringify, the same options),
 * each built on its route's first response instead of at start: building all
 * of them was the largest single cost of a boot (~25 ms, ~2 MiB), for routes a
 * sandbox may never call. Even the compiler is made on that first response,
 * so that starting (and answering /health, which sends its JSON as text) never
 * runs fast-json-stringify's module code (build.mjs loads it on first use).
 */
export const buildLazySerializers: SerializerFactory = (externalSchemas, options) => {
  let compile: ReturnType<ReturnType<typeof SerializerSelector>> | undefined;
  const compileRoute: ReturnType<SerializerFactory> = (route) => (compile ??= SerializerSelector()(externalSchemas, options))(route);
  return (route) => {
    let serialize: ((data: unknown) => string) | undefined;
    return (data) => (serialize ??= compileRoute(route))(data);
  };
};
