import { afterAll, beforeAll, expect, it } from 'vitest';
import { MemoryBudget } from '../../src/memory-budget.js';
import { RESULT_STEP_BYTES } from '../../src/sessions/sinks.js';
import { commandUser } from '../helpers/command-user.js';
import { startServer, type TestServer } from '../helpers/server.js';

// A session command's JSON result is built in envd's memory: it takes that memory from the budget's
// `transfers` part as it grows, stops growing (and says so) when the part is spent, and gives it back.

const MIB = 1024 * 1024;
const TRANSFERS = 1 * MIB;
let user: Awaited<ReturnType<typeof commandUser>>;
let server: TestServer;
let budget: MemoryBudget;
beforeAll(async () => {
  user = await commandUser();
  budget = new MemoryBudget({ streams: 4 * MIB, transfers: TRANSFERS, archives: 4 * MIB, watches: MIB });
  server = await startServer({ defaultUser: user.user.name }, { memoryBudget: budget });
});
afterAll(async () => {
  await server?.close();
  user?.remove();
});

it("keeps a session command's result within the budget's transfers part, marks it truncated, and gives the part back", async () => {
  const { status, body: session } = await server.json('POST', '/sessions', {});
  expect(status).toBe(201);
  // 3 MiB of 'x' lines on stdout, a short line on stderr after it.
  const big = await server.json('POST', `/sessions/${session.id}/commands`, { cmd: "yes xxxxxxxxxxxxxxx | head -c 3145728; echo done >&2" });
  expect(big.status).toBe(200);
  expect(big.body.stdout_truncated).toBe(true);
  expect(big.body.stdout.length).toBeLessThanOrEqual(TRANSFERS);
  expect(big.body.stdout.length).toBeGreaterThanOrEqual(TRANSFERS - RESULT_STEP_BYTES);
  expect(/^(x{15}\n)*x*$/.test(big.body.stdout)).toBe(true);
  expect(big.body.exit_code).toBe(0);
  expect(budget.usage().transfers).toBe(0);
  // With the part back, the next command's result is whole.
  const small = await server.json('POST', `/sessions/${session.id}/commands`, { cmd: 'head -c 300000 /dev/zero | tr "\\0" y; echo; echo ok >&2' });
  expect(small.body.stdout.length).toBe(300_001);
  expect(small.body.stderr).toBe('ok\n');
  expect(small.body.stdout_truncated).toBeUndefined();
  expect(budget.usage().transfers).toBe(0);
  expect((await server.json('DELETE', `/sessions/${session.id}`)).status).toBe(200);
});
