import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Stress, proxy and guest suites have their own configs and npm scripts.
    exclude: ['test/stress/**', 'test/proxy/**', 'test/guest/**', 'node_modules/**'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Tests count processes and file descriptors: one file at a time keeps those counts honest.
    fileParallelism: false,
    pool: 'forks',
    setupFiles: ['test/helpers/no-leftover-temps.ts'],
  },
});
