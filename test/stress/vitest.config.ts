import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    root: new URL('../..', import.meta.url).pathname,
    include: ['test/stress/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
    // Each scenario measures envd's fds and RSS: one at a time.
    fileParallelism: false,
    pool: 'forks',
    setupFiles: ['test/helpers/no-leftover-temps.ts'],
  },
});
