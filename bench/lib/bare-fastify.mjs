// The HTTP floor's baseline: a bare fastify app with one route (the same reply
// and response schema as envd's /health), no logger, no hooks, in its own process.
import Fastify from 'fastify';

const app = Fastify({ logger: false });
const reply = { status: 'ok', version: '0.1.0' };
app.get(
  '/health',
  { schema: { response: { 200: { type: 'object', properties: { status: { type: 'string' }, version: { type: 'string' } } } } } },
  async () => reply,
);
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) });
