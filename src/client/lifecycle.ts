import type { Static } from '@sinclair/typebox';
import type { EnvsSchema, HealthSchema, InitBody, MetricsSchema, OpenApiSchema } from '../lifecycle/schemas.js';
import type { CallOptions, Http } from './http.js';

/** /health, /init, /envs, /metrics, /openapi.json. */
export class Lifecycle {
  constructor(private readonly http: Http) {}

  health(options: CallOptions = {}): Promise<Static<typeof HealthSchema>> {
    return this.http.json('GET', '/health', { signal: options.signal });
  }

  async init(body: Static<typeof InitBody>, options: CallOptions = {}): Promise<void> {
    await this.http.send('POST', '/init', { json: body, signal: options.signal });
  }

  envs(options: CallOptions = {}): Promise<Static<typeof EnvsSchema>> {
    return this.http.json('GET', '/envs', { signal: options.signal });
  }

  metrics(options: CallOptions = {}): Promise<Static<typeof MetricsSchema>> {
    return this.http.json('GET', '/metrics', { signal: options.signal });
  }

  openApi(options: CallOptions = {}): Promise<Static<typeof OpenApiSchema>> {
    return this.http.json('GET', '/openapi.json', { signal: options.signal });
  }
}
