export const DB_SERVICES: readonly ['gateway', 'billing', 'payments', 'nwc', 'notifier'];
export function provisionDbRoles(
  adminUrl: string,
  opts?: { prefix?: string },
): Promise<Record<'gateway' | 'billing' | 'payments' | 'nwc' | 'notifier', string>>;
export function dropDbRoles(adminUrl: string, opts: { prefix: string }): Promise<void>;
export function dbUrlVar(service: string): string;
