import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { SnapshotControl, PrepareOptions } from './snapshot-control.js';
import { PrepareAnswer, PrepareBody, ThawAnswer } from './schemas.js';

export interface SnapshotRoutesOptions {
  snapshot: SnapshotControl;
}

/** POST /snapshot/prepare and /snapshot/thaw (docs/api.md, "Snapshots and forks"). */
export const snapshotRoutes: FastifyPluginAsyncTypebox<SnapshotRoutesOptions> = async (app, { snapshot }) => {
  app.post(
    '/prepare',
    {
      // No body means the defaults, like {}.
      preValidation: async (request) => {
        if (request.body === undefined) request.body = {};
      },
      schema: {
        summary: 'Quiesce the sandbox before a snapshot: freeze, sync, trim, drop caches, freeze filesystems',
        description: 'Thawed again by /init (after it sets the clock), POST /snapshot/thaw, or by itself after thaw_after_ms.',
        body: PrepareBody,
        response: { 200: PrepareAnswer },
      },
    },
    async (request) => snapshot.prepare(request.body as PrepareOptions),
  );

  app.post(
    '/thaw',
    {
      schema: {
        summary: 'Thaw what /snapshot/prepare froze (a pause that failed); idempotent',
        response: { 200: ThawAnswer },
      },
    },
    async () => snapshot.thaw('request'),
  );
};
