import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTempName } from '../../src/files/atomic-write.js';
import { UPLOAD_IDLE_MS } from '../../src/files/upload.js';
import { startServer, type TestServer } from '../helpers/server.js';

/**
 * docs/api.md: "A body that stops for 60 s is 408." Large bodies (spliced by
 * the holder) had it; small and chunked ones, read by Node, waited forever
 * (issue 43: no answer after 150 s). This waits the real 60 s: the limit is
 * one constant, and what is proved is that constant at its edge.
 */
// Both at once: each waits the real 60 s.
describe.concurrent('an upload body that stops', () => {
  let server: TestServer;
  let dir: string;
  beforeAll(async () => {
    server = await startServer();
    dir = mkdtempSync(join(tmpdir(), 'envd-stall-'));
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const kind of ['small, with a Content-Length', 'chunked'] as const) {
    it(`is answered 408 after UPLOAD_IDLE_MS (${UPLOAD_IDLE_MS / 1000} s) without a byte, leaving the target and no temporary file (${kind})`, async () => {
      // A directory each: the two run at once, and one's temporary file lives until its own 408.
      const own = mkdtempSync(join(dir, `${kind === 'chunked' ? 'chunked' : 'small'}-`));
      const target = join(own, kind === 'chunked' ? 'chunked.txt' : 'small.txt');
      writeFileSync(target, 'old\n');
      const headers: Record<string, string> = { authorization: `Bearer ${server.token}`, 'content-type': 'application/octet-stream' };
      if (kind !== 'chunked') headers['content-length'] = String(100_000);
      const started = Date.now();
      const answer = await new Promise<{ status: number; body: any }>((resolve, reject) => {
        const req = request(`${server.url}/files/raw?path=${encodeURIComponent(target)}`, { method: 'PUT', headers }, (res) => {
          let text = '';
          res.on('data', (chunk) => (text += chunk));
          res.on('end', () => {
            req.destroy();
            resolve({ status: res.statusCode!, body: JSON.parse(text) });
          });
        });
        req.on('error', reject);
        // 1 KiB, then nothing: the client is stuck, not gone.
        req.write(Buffer.alloc(1024, 'x'));
      });
      const waited = Date.now() - started;
      expect(answer).toEqual({ status: 408, body: { message: `upload stalled: no body bytes for ${UPLOAD_IDLE_MS / 1000} s` } });
      expect(waited).toBeGreaterThanOrEqual(UPLOAD_IDLE_MS - 100);
      expect(waited).toBeLessThan(UPLOAD_IDLE_MS + 15_000);
      expect(readFileSync(target, 'utf8')).toBe('old\n');
      expect(readdirSync(own).filter(isTempName)).toEqual([]);
    }, UPLOAD_IDLE_MS + 30_000);
  }
});
