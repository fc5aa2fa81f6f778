import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/proxy/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
    // One nginx and one envd per file, measured (RSS) while they work: one file at a time.
    fileParallelism: false,
    pool: 'forks',
    setupFiles: ['test/helpers/no-leftover-temps.ts'],
  },
});
