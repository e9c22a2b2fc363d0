import type { TestProject } from 'vitest/node';
import { info, startStack, type Stack, type StackInfo } from './stack.js';

declare module 'vitest' {
  export interface ProvidedContext {
    stack: StackInfo;
  }
}

let stack: Stack | undefined;

/** One shared stack for the e2e files that need no special configuration. */
export async function setup(project: TestProject): Promise<void> {
  stack = await startStack({ wallets: 0 });
  project.provide('stack', info(stack));
}

export async function teardown(): Promise<void> {
  await stack?.stop();
}
