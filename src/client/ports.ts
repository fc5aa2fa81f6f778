import type { Static } from '@sinclair/typebox';
import type { Port, PortEvents, PortList } from '../ports/schemas.js';
import type { CallOptions, Http } from './http.js';
import { parseSse, type EventOf } from './sse.js';

export type PortInfo = Static<typeof Port>;
/** An event of a ports watch (`ready`, `open`, `close`, `error`), typed by its name (PortEvents). */
export type PortEvent = EventOf<typeof PortEvents>;

/** /ports: the guest's listening sockets, and their changes. */
export class Ports {
  constructor(private readonly http: Http) {}

  /** GET /ports: every listening TCP socket and bound UDP socket, with the process, command and service holding it. */
  async list(options: CallOptions = {}): Promise<PortInfo[]> {
    return (await this.http.json<Static<typeof PortList>>('GET', '/ports', { signal: options.signal })).ports;
  }

  /** GET /ports/watch: `ready` with every port open now, then `open` and `close` until the signal aborts. */
  async *watch(options: CallOptions = {}): AsyncGenerator<PortEvent> {
    const response = await this.http.send('GET', '/ports/watch', { signal: options.signal });
    for await (const event of parseSse(response.body!)) yield event as PortEvent;
  }
}
