export const NATS_USERS: string[];
export function passwordVar(user: string): string;
export function natsPasswords(): Record<string, string>;
export function natsAuthConfig(opts?: { devMode?: boolean }): string;
export function natsServerConfig(opts: {
  host?: string;
  port: number;
  storeDir: string;
  devMode?: boolean;
  tls?: { certFile: string; keyFile: string };
  serverName?: string;
  cluster?: { name: string; port: number; routes: string[] };
  maxMemory?: string;
}): string;
