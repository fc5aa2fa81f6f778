import type { Static } from '@sinclair/typebox';
import type { ServiceDefinition, ServiceDeleted, ServiceList, ServiceLogs, ServiceRecord } from '../services/schemas.js';
import type { CommandEvent } from './commands.js';
import type { CallOptions, Http } from './http.js';
import { parseSse } from './sse.js';

export type { ServiceDefinition, ServiceRecord };
export type ServiceLogsPage = Static<typeof ServiceLogs>;

/** /services: supervised commands (restart policies, readiness, dependencies). */
export class Services {
  constructor(private readonly http: Http) {}

  /** PUT /services/{name}: define or change it; it starts once its dependencies are ready. */
  put(name: string, definition: ServiceDefinition, options: CallOptions = {}): Promise<ServiceRecord> {
    return this.http.json('PUT', `/services/${encodeURIComponent(name)}`, { json: definition, signal: options.signal });
  }

  /** GET /services. */
  async list(options: CallOptions = {}): Promise<ServiceRecord[]> {
    return (await this.http.json<Static<typeof ServiceList>>('GET', '/services', { signal: options.signal })).services;
  }

  /** GET /services/{name} (404 EnvdError for an unknown one). */
  get(name: string, options: CallOptions = {}): Promise<ServiceRecord> {
    return this.http.json('GET', `/services/${encodeURIComponent(name)}`, { signal: options.signal });
  }

  /** DELETE /services/{name}: stop it and forget it. */
  async delete(name: string, options: CallOptions = {}): Promise<void> {
    await this.http.json<Static<typeof ServiceDeleted>>('DELETE', `/services/${encodeURIComponent(name)}`, { signal: options.signal });
  }

  /** POST /services/{name}/start|stop|restart: its record after (stop answers once the run has ended). */
  control(name: string, verb: 'start' | 'stop' | 'restart', options: CallOptions = {}): Promise<ServiceRecord> {
    return this.http.json('POST', `/services/${encodeURIComponent(name)}/${verb}`, { signal: options.signal });
  }

  /** GET /services/{name}/logs: the current run's output after `from` (a page: pass its `cursor` as the next `from`). */
  logs(name: string, query: { from?: string } = {}, options: CallOptions = {}): Promise<ServiceLogsPage> {
    return this.http.json('GET', `/services/${encodeURIComponent(name)}/logs`, { query, signal: options.signal });
  }

  /** GET /services/{name}/logs?follow=1: the run's events from `from` until it ends. */
  async *follow(name: string, query: { from?: string; encoding?: 'utf8' | 'base64' } = {}, options: CallOptions = {}): AsyncGenerator<CommandEvent> {
    const response = await this.http.send('GET', `/services/${encodeURIComponent(name)}/logs`, { query: { ...query, follow: '1' }, signal: options.signal });
    for await (const event of parseSse(response.body!)) yield event as CommandEvent;
  }
}
