import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['libs/*/test/**/*.test.ts', 'services/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Every e2e file runs real processes (most start a stack of their own): on a 2-core machine files run
    // one at a time, or service starts and bus timeouts turn into noise.
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 240_000,
    // What a page or service does after an action is waited for as a person would (vitest's default 1 s
    // failed a portal cancel under CI load, three probes beside it): a failure still ends the wait.
    expect: { poll: { timeout: 15_000 } },
    reporters: ['default'],
  },
});
