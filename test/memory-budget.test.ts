import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpError } from '../src/errors.js';
import { MEMORY_BUDGET_BYTES, MEMORY_SPLIT, MemoryBudget, RESERVE_BYTES } from '../src/memory-budget.js';
import { startServer, type TestServer } from './helpers/server.js';

const MIB = 1024 * 1024;
const split = (transfers: number) => ({ ...MEMORY_SPLIT, transfers });

describe('MemoryBudget', () => {
  it('is the sum of its documented split, and every reservation of one piece of work fits its part', () => {
    expect(MEMORY_BUDGET_BYTES).toBe(Object.values(MEMORY_SPLIT).reduce((a, b) => a + b, 0));
    expect(MEMORY_BUDGET_BYTES).toBeLessThanOrEqual(64 * MIB);
    expect(RESERVE_BYTES.download).toBeLessThanOrEqual(MEMORY_SPLIT.transfers);
    expect(RESERVE_BYTES.archiveUpload).toBeLessThanOrEqual(MEMORY_SPLIT.archives);
    expect(RESERVE_BYTES.archiveDownload).toBeLessThanOrEqual(MEMORY_SPLIT.archives);
    // The stress suite's 100 stalled streams and 200 watches fit their parts.
    expect(100 * RESERVE_BYTES.stream).toBeLessThanOrEqual(MEMORY_SPLIT.streams);
    expect(200 * RESERVE_BYTES.watch).toBeLessThanOrEqual(MEMORY_SPLIT.watches);
  });

  it('gives a part up to its share at once, then makes new work wait and serves it in order as shares come back', async () => {
    const budget = new MemoryBudget(split(8 * MIB), 10_000);
    const first = await budget.reserve('transfers', 4 * MIB);
    const second = await budget.reserve('transfers', 4 * MIB); // exactly the share
    expect(budget.usage()).toMatchObject({ transfers: 8 * MIB, total: 8 * MIB });
    const order: string[] = [];
    const big = budget.reserve('transfers', 4 * MIB).then((r) => (order.push('big'), r));
    const small = budget.reserve('transfers', 1 * MIB).then((r) => (order.push('small'), r));
    // Another part is not held up by this one.
    await budget.reserve('streams', RESERVE_BYTES.stream);
    await new Promise((r) => setTimeout(r, 20));
    expect(order).toEqual([]);
    first.release();
    first.release(); // once only
    await big;
    await new Promise((r) => setTimeout(r, 20));
    // The small one came second and does not fit yet: it does not overtake.
    expect(order).toEqual(['big']);
    expect(budget.usage().transfers).toBe(8 * MIB);
    second.release();
    await small;
    expect(order).toEqual(['big', 'small']);
    expect(budget.usage().transfers).toBe(5 * MIB);
  });

  it('answers 503 "retry" when the share does not come back within the wait, and serves the next in line after it', async () => {
    const budget = new MemoryBudget(split(4 * MIB), 50);
    const held = await budget.reserve('transfers', 3 * MIB);
    const refused = await budget.reserve('transfers', 2 * MIB).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(HttpError);
    expect((refused as HttpError).status).toBe(503);
    expect((refused as HttpError).message).toMatch(/memory for transfers .* retry shortly/);
    expect((refused as HttpError).headers['retry-after']).toBe('1');
    // More than the whole share can never be served: refused at once.
    await expect(budget.reserve('transfers', 5 * MIB)).rejects.toMatchObject({ status: 503 });
    held.release();
    expect(budget.usage().transfers).toBe(0);
  });
});

describe('the memory budget on a real envd', () => {
  let server: TestServer;
  let dir: string;
  let file: string;
  beforeAll(async () => {
    // Room for two downloads; a third waits 1 s, then is refused.
    server = await startServer({}, { memoryBudget: new MemoryBudget(split(2 * RESERVE_BYTES.download), 1_000) });
    dir = mkdtempSync(join(tmpdir(), 'envd-budget-'));
    file = join(dir, 'big.bin');
    writeFileSync(file, Buffer.alloc(32 * MIB, 7));
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A download whose client reads the headers and then nothing: it holds its share until closed. */
  const stalledDownload = () =>
    new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(`${server.url}/files/raw?path=${encodeURIComponent(file)}`, { agent: false, headers: { authorization: `Bearer ${server.token}` } }, (res) => {
        res.pause();
        resolve(res);
      });
      req.on('error', reject);
      req.end();
    });

  it('makes a download wait while the transfers share is held, answers 503 "retry" after the wait, and serves it once a share comes back', async () => {
    const [a, b] = [await stalledDownload(), await stalledDownload()];
    expect([a.statusCode, b.statusCode]).toEqual([200, 200]);
    expect(server.app.envd.memoryBudget.usage().transfers).toBe(2 * RESERVE_BYTES.download);
    expect((await server.json('GET', '/metrics')).body.client_memory_bytes).toBe(2 * RESERVE_BYTES.download);

    const refused = await server.json('GET', `/files/raw?path=${encodeURIComponent(file)}`);
    expect(refused.status).toBe(503);
    expect(refused.body.message).toMatch(/retry shortly/);

    // A waiting download goes on once a stalled one is gone.
    const waiting = server.call('GET', `/files/raw?path=${encodeURIComponent(file)}`);
    await new Promise((r) => setTimeout(r, 200));
    a.destroy();
    const served = await waiting;
    expect(served.status).toBe(200);
    expect((await served.arrayBuffer()).byteLength).toBe(32 * MIB);
    b.destroy();
    await expect.poll(() => server.app.envd.memoryBudget.usage().transfers, { timeout: 5_000 }).toBe(0);
  });

  it('takes nothing for a request refused before it (no token)', async () => {
    const response = await fetch(`${server.url}/files/raw?path=${encodeURIComponent(file)}`);
    expect(response.status).toBe(401);
    expect(server.app.envd.memoryBudget.usage().total).toBe(0);
  });
});
