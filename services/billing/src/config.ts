import { z } from 'zod';
import { commonConfig, envInt, loadConfig } from '@sb/runtime';

export const loadBillingConfig = () =>
  loadConfig({
    ...commonConfig,
    BILLING_OPS_PORT: envInt(9101),
    DB_POOL_MAX: envInt(10, 1),
    LIGHTNING_PROVIDER: z.enum(['dev', 'lnbits']).optional(),
  });
export type BillingConfig = ReturnType<typeof loadBillingConfig>;
