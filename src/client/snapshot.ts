import type { Static } from '@sinclair/typebox';
import type { PrepareAnswer, PrepareBody, ThawAnswer } from '../snapshot/schemas.js';
import type { CallOptions, Http } from './http.js';

export type PrepareRequest = Static<typeof PrepareBody>;
export type PrepareResult = Static<typeof PrepareAnswer>;
export type ThawResult = Static<typeof ThawAnswer>;

/** /snapshot/prepare and /snapshot/thaw: quiesce before a pause, thaw after one that failed. */
export class Snapshot {
  constructor(private readonly http: Http) {}

  prepare(body: PrepareRequest = {}, options: CallOptions = {}): Promise<PrepareResult> {
    return this.http.json('POST', '/snapshot/prepare', { json: body, signal: options.signal });
  }

  thaw(options: CallOptions = {}): Promise<ThawResult> {
    return this.http.json('POST', '/snapshot/thaw', { signal: options.signal });
  }
}
