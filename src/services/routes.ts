import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Config } from '../config.js';
import { conflict, ErrorSchema } from '../errors.js';
import type { ProcessRegistry } from '../commands/registry.js';
import { resumeCursor } from '../commands/resume.js';
import { streamProcess } from '../commands/sse.js';
import { RESERVE_BYTES } from '../memory-budget.js';
import { readLogsPage } from './logs.js';
import type { ServiceManager } from './manager.js';
import { ServiceBody, type ServiceDefinition, ServiceDeleted, ServiceList, ServiceLogs, ServiceLogsQuery, ServiceNameParams, ServiceRecord } from './schemas.js';
import type { Service } from './service.js';

export interface ServiceRoutesOptions {
  config: Config;
  processes: ProcessRegistry;
  services: ServiceManager;
}

const errors = { '4xx': ErrorSchema, '5xx': ErrorSchema };

const EventStream = {
  description: 'Server-sent events, as GET /commands/{pid}/stream: start, the output from `from`, then live output until the run ends',
  content: { 'text/event-stream': { schema: Type.String() } },
};

/** The service routes (issue 39 §4): define, list, start/stop/restart, delete, and read a run's output. */
export const serviceRoutes: FastifyPluginAsyncTypebox<ServiceRoutesOptions> = async (app, { config, processes, services }) => {
  app.put(
    '/:name',
    {
      schema: {
        summary: 'Define (201) or change (200) a service and start it once its dependencies are ready; a running one that changed restarts',
        params: ServiceNameParams,
        body: ServiceBody,
        response: { 200: ServiceRecord, 201: ServiceRecord, ...errors },
      },
    },
    async (request, reply) => {
      // The type provider cannot see through Unsafe (restart's enum): the schema guarantees it.
      const { created, service } = await services.define(request.params.name, request.body as ServiceDefinition);
      return reply.code(created ? 201 : 200).send(service.record());
    },
  );

  app.get('', { schema: { summary: 'Every service and its state', response: { 200: ServiceList, ...errors } } }, async () => ({
    services: services.list().map((service) => service.record()),
  }));

  app.get('/:name', { schema: { summary: 'A service and its state', params: ServiceNameParams, response: { 200: ServiceRecord, ...errors } } }, async (request) =>
    services.get(request.params.name).record(),
  );

  app.delete('/:name', { schema: { summary: 'Stop a service (SIGTERM, then SIGKILL) and forget it', params: ServiceNameParams, response: { 200: ServiceDeleted, ...errors } } }, async (request) => {
    await services.remove(request.params.name);
    return { deleted: true as const };
  });

  const action = (verb: 'start' | 'stop' | 'restart', summary: string, run: (service: Service) => Promise<void> | void) =>
    app.post(`/:name/${verb}`, { schema: { summary, params: ServiceNameParams, response: { 200: ServiceRecord, ...errors } } }, async (request) => {
      const service = services.get(request.params.name);
      await run(service);
      return service.record();
    });
  action('start', 'Start a stopped or failed service (once its dependencies are ready)', (service) => service.start());
  action('stop', 'Stop a service: SIGTERM to its process group, SIGKILL 5 s later; answers once it has ended', (service) => service.stop());
  action('restart', 'Stop a service, then start it again (the back-off starts over)', async (service) => {
    await service.stop();
    await service.start();
  });

  app.get(
    '/:name/logs',
    {
      config: { memory: { part: 'streams', bytes: RESERVE_BYTES.stream } },
      schema: {
        summary: "The current run's output from a cursor (`from` or Last-Event-ID): JSON pages, or with follow=1 server-sent events until the run ends",
        params: ServiceNameParams,
        querystring: ServiceLogsQuery,
        response: { 200: { description: 'JSON page (ServiceLogs), or with follow=1 an event stream', content: { 'application/json': { schema: ServiceLogs }, ...EventStream.content } }, ...errors },
      },
    },
    async (request, reply) => {
      const service = services.get(request.params.name);
      const proc = service.run;
      if (!proc) throw conflict(`service ${service.name} has not run yet`);
      const from = await resumeCursor(proc, request.query.from, request.headers['last-event-id']);
      reply.raw.once('close', processes.answering(proc));
      const follow = request.query.follow === '1' || request.query.follow === 'true';
      if (!follow) return reply.type('application/json; charset=utf-8').send(await readLogsPage(proc, from));
      await streamProcess(request, reply, proc, { killOnDisconnect: false, lendSocket: config.directOutput, from, bytes: request.query.encoding === 'base64' });
    },
  );
};
