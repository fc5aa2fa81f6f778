import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { RESERVE_BYTES } from '../memory-budget.js';
import type { PortTable } from './port-table.js';
import { PortList } from './schemas.js';
import { streamPorts } from './watch-stream.js';

export interface PortRoutesOptions {
  table: PortTable;
}

export const portRoutes: FastifyPluginAsyncTypebox<PortRoutesOptions> = async (app, { table }) => {
  app.get(
    '',
    { schema: { summary: 'Every listening TCP socket and bound UDP socket in the guest, with the process, command and service that hold it', response: { 200: PortList } } },
    async () => {
      const ports = table.list();
      return table.truncated ? { ports, truncated: true } : { ports };
    },
  );

  app.get(
    '/watch',
    {
      config: { memory: { part: 'watches', bytes: RESERVE_BYTES.watch } },
      schema: { summary: 'Watch ports: text/event-stream of ready (every port open now), then open and close events', produces: ['text/event-stream'] },
    },
    async (request, reply) => {
      reply.hijack();
      await streamPorts(table, request.raw, reply.raw, request.log);
    },
  );
};
