import { Type, type TSchema } from '@sinclair/typebox';
import { ErrorSchema } from '../errors.js';

const nullable = <T extends ReturnType<typeof Type.Integer> | ReturnType<typeof Type.String>>(schema: T, description: string) =>
  Type.Union([schema, Type.Null()], { description });

const PortFields = {
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  protocol: Type.Union([Type.Literal('tcp'), Type.Literal('udp')], { description: 'tcp: a listening socket; udp: a bound, unconnected one' }),
  address: Type.String({ description: 'The local address it is bound to: 0.0.0.0 and :: mean every address, 127.0.0.1 and ::1 loopback only' }),
  pid: nullable(Type.Integer({ minimum: 1 }), 'The process holding the socket (the topmost one when a parent and its children share it); null when envd cannot see it'),
  command_pid: nullable(Type.Integer({ minimum: 1 }), 'The tracked command whose tree holds it (its cgroup, session or ancestors); null for anything envd did not start'),
  service: nullable(Type.String(), 'The service whose command holds it; null otherwise'),
  cmd: nullable(Type.String(), "The holding process's command line, arguments joined by spaces"),
  user: Type.String({ description: 'The user that created the socket (its uid when /etc/passwd has no name for it)' }),
};

export const Port = Type.Object(PortFields, { additionalProperties: false, title: 'Port' });

/**
 * The same fields for events: @fastify/swagger turns a route's `anyOf [T, null]`
 * into OpenAPI 3.0's `nullable`, but leaves events alone, so they say it themselves.
 */
const EventPortFields = Object.fromEntries(
  Object.entries(PortFields).map(([name, schema]) => {
    const anyOf = (schema as { anyOf?: TSchema[] }).anyOf;
    if (name === 'protocol' || !anyOf) return [name, schema];
    return [name, Type.Unsafe({ ...anyOf[0], description: schema.description, nullable: true })];
  }),
) as typeof PortFields; // the same values, spelled for the document

export const PortList = Type.Object(
  {
    ports: Type.Array(Port),
    truncated: Type.Optional(Type.Boolean({ description: 'true when the guest has more sockets than envd tracks (4,096): the rest, UDP first, are not listed' })),
  },
  { additionalProperties: false, title: 'PortList' },
);

/**
 * The events of GET /ports/watch, name to data (the document's `x-events`, the
 * client's PortEvent). No SSE ids: a watch cannot be resumed, its `ready` says what is open.
 */
export const PortEvents = {
  // Events are not rewritten the way @fastify/swagger rewrites routes' nullable fields: their own schemas, not Port's title.
  ready: Type.Object({ ports: Type.Array(Type.Object(EventPortFields, { additionalProperties: false })) }, { title: 'PortsReadyEvent', description: 'First event: every port open now; opens and closes from here on are seen' }),
  open: Type.Object(EventPortFields, { additionalProperties: false, title: 'PortOpenEvent', description: 'A socket started listening (TCP) or was bound (UDP)' }),
  close: Type.Object(EventPortFields, { additionalProperties: false, title: 'PortCloseEvent', description: 'A socket stopped listening or was closed: the fields it had' }),
  error: ErrorSchema,
};
