import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../app.js';
import { parseCli } from '../config.js';
import { createLogger } from '../logger.js';
import { generatedOpenApi } from './openapi.js';

/**
 * The OpenAPI document of envd's routes as JSON text: build.mjs runs this once
 * per build and bakes the text into the bundle, so envd never loads the
 * generator. The document does not depend on the configuration; the defaults do.
 */
export async function generateOpenApiJson(): Promise<string> {
  // Its own throw-away state and spool directories: the build must not touch /run/envd or re-adopt anything.
  const dirs = mkdtempSync(join(tmpdir(), 'envd-openapi-'));
  try {
    const action = parseCli(['--state-dir', join(dirs, 'state'), '--spool-dir', join(dirs, 'spool')], {});
    if (action.kind !== 'run') throw new Error('parseCli did not give a configuration');
    const app = await buildApp({ config: action.config, logger: createLogger('silent'), openApi: generatedOpenApi });
    try {
      await app.ready();
      return generatedOpenApi.json(app);
    } finally {
      await app.close();
    }
  } finally {
    rmSync(dirs, { recursive: true, force: true });
  }
}
