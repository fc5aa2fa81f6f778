import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterAll, beforeAll, expect } from 'vitest';

// Loaded before every test file (setupFiles): a file that leaves an `envd-*`
// entry in the temporary directory fails, whether its tests passed or not.
// Its afterAll runs after the file's own (hooks unwind as a stack).
const ours = () => readdirSync(tmpdir()).filter((name) => name.startsWith('envd-'));

let before: Set<string>;
beforeAll(() => {
  before = new Set(ours());
});
afterAll(() => {
  expect(ours().filter((name) => !before.has(name)), `temporary entries left in ${tmpdir()}`).toEqual([]);
});
