import type { ChildProcess } from 'node:child_process';

export const ROOT: string;
export const API_PREFIX: string;
export function freePort(avoid?: number[]): Promise<number>;
export function findNatsServer(): string | undefined;
export function startNats(
  dir: string,
  opts?: {
    port?: number;
    secure?: boolean;
    devMode?: boolean;
    tls?: { certFile: string; keyFile: string };
    passwords?: Record<string, string>;
    avoid?: number[];
  },
): Promise<{
  url: string;
  port: number;
  child: ChildProcess;
  env: Record<string, string>;
  operator: { user?: string; pass?: string };
  logFile?: string;
  stop(): Promise<void>;
}>;
export function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void>;
export function waitReady(url: string, timeoutMs?: number, child?: ChildProcess): Promise<void>;
export function startService(
  name: 'billing' | 'gateway' | 'payments' | 'nwc' | 'notifier',
  env: Record<string, string>,
  opts?: { output?: 'inherit' | 'ignore' | ((line: string) => void); port?: number; waitReady?: boolean },
): Promise<{ name: string; port: number; child: ChildProcess; lines: string[]; url: string; stop(): Promise<void> }>;
export function stopChild(child: ChildProcess, signal?: NodeJS.Signals): Promise<void>;
export function walletCli(databaseUrl: string, ...args: string[]): Promise<any>;
export function createWallet(databaseUrl: string, name: string): Promise<{ id: string; name: string; admin_key: string; invoice_key: string }>;
