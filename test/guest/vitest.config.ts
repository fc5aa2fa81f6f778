import { defineConfig } from 'vitest/config';

// The guest suite boots real machines (systemd-nspawn, qemu): one file at a time, long timeouts.
export default defineConfig({
  test: {
    include: ['test/guest/**/*.test.ts'],
    globalSetup: ['test/guest/build-guest.ts'],
    testTimeout: 180_000,
    hookTimeout: 300_000,
    fileParallelism: false,
    pool: 'forks',
    // A step depends on the ones before it (the token from /init, the pid started earlier).
    sequence: { concurrent: false },
  },
});
