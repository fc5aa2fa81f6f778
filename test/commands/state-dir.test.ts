import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StateDir, USAGE_SLOTS } from '../../src/commands/state-dir.js';

const SLOT_BYTES = 16;
let root: string | undefined;
afterEach(() => {
  if (root) rmSync(root, { recursive: true, force: true });
  root = undefined;
});

/** A state dir whose usage table a previous envd left full: every byte 0xAB. */
async function leftBehind(): Promise<StateDir> {
  root = mkdtempSync(join(tmpdir(), 'envd-state-'));
  writeFileSync(join(root, 'usage'), Buffer.alloc(USAGE_SLOTS * SLOT_BYTES, 0xab));
  return StateDir.open(join(root), join(root, 'spool'));
}

const slotBytes = (table: Buffer, slot: number) => table.subarray(slot * SLOT_BYTES, (slot + 1) * SLOT_BYTES);

describe('the usage table', () => {
  it('keeps the slots of re-adopted commands and zeroes every other, the first and the last included', async () => {
    const state = await leftBehind();
    state.claimSlots([3, 7, 7, USAGE_SLOTS - 1]);
    const table = readFileSync(join(root!, 'usage'));
    expect(table.length).toBe(USAGE_SLOTS * SLOT_BYTES);
    for (const kept of [3, 7, USAGE_SLOTS - 1]) expect(slotBytes(table, kept).every((b) => b === 0xab)).toBe(true);
    const others = Buffer.concat([table.subarray(0, 3 * SLOT_BYTES), table.subarray(4 * SLOT_BYTES, 7 * SLOT_BYTES), table.subarray(8 * SLOT_BYTES, (USAGE_SLOTS - 1) * SLOT_BYTES)]);
    expect(others.every((b) => b === 0)).toBe(true);
    state.close();
  });

  it('hands out every free slot once, skipping taken ones, reuses released ones first, then answers 503', async () => {
    const state = await leftBehind();
    state.claimSlots([1, 2]);
    expect([state.takeSlot(), state.takeSlot(), state.takeSlot()]).toEqual([0, 3, 4]);
    state.releaseSlot(3);
    expect(state.takeSlot()).toBe(3);
    const seen = new Set([0, 1, 2, 3, 4]);
    for (let i = 0; i < USAGE_SLOTS - 5; i++) seen.add(state.takeSlot());
    expect(seen.size).toBe(USAGE_SLOTS);
    expect(() => state.takeSlot()).toThrow(expect.objectContaining({ status: 503 }));
    // A released slot is zeroed before anyone gets it again.
    writeFileSync(join(root!, 'usage'), Buffer.alloc(SLOT_BYTES, 0xcd), { flag: 'r+' });
    state.releaseSlot(0);
    expect(slotBytes(readFileSync(join(root!, 'usage')), 0).every((b) => b === 0)).toBe(true);
    expect(state.takeSlot()).toBe(0);
    state.close();
  });
});
