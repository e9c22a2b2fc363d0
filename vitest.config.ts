import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['libs/*/test/**/*.test.ts', 'services/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Every e2e file talks to real processes; on a 2-core machine two files at a time is the sweet spot.
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 240_000,
    reporters: ['default'],
  },
});
