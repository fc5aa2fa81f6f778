import { expect } from 'vitest';
import type { TestServer } from '../helpers/server.js';
import { waitFor } from '../helpers/proc.js';

/** GET /services/{name}: its record. */
export async function service(server: TestServer, name: string): Promise<any> {
  const { status, body } = await server.json('GET', `/services/${name}`);
  expect(status, JSON.stringify(body)).toBe(200);
  return body;
}

/** PUT /services/{name}, expecting `status` (201 by default). */
export async function put(server: TestServer, name: string, definition: Record<string, unknown>, status = 201): Promise<any> {
  const answer = await server.json('PUT', `/services/${name}`, definition);
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  return answer.body;
}

/** Waits until the service's record passes `check`; answers that record. */
export async function until(server: TestServer, name: string, check: (record: any) => boolean, what: string, timeoutMs = 20_000): Promise<any> {
  let last: any;
  await waitFor(
    async () => {
      last = await service(server, name);
      return check(last);
    },
    timeoutMs,
    `${name}: ${what}`,
  ).catch((error: Error) => {
    throw new Error(`${error.message}; last: ${JSON.stringify(last)}`);
  });
  return last;
}
