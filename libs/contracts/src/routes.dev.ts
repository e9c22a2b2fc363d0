import { z } from './zod.js';
import { IdParams, UnixSeconds } from './common.js';
import { defineRoutes } from './http.js';
import { Payment } from './payments.js';

export const DevClockRequest = z
  .strictObject({
    advance_seconds: z
      .number()
      .int()
      .min(0)
      .max(20 * 365 * 86400)
      .default(0),
    hold: z.boolean().optional().openapi({
      description:
        'true: time stands still for every service (two things happen in one second) until false lets it run on from there; advance_seconds still moves it',
    }),
  })
  .openapi('DevClockRequest');
export const DevInvoiceParams = z.strictObject({ payment_hash: z.string().regex(/^[0-9a-f]{64}$/, '64 lower-case hex characters') });
export const DevInvoicePaid = z.object({ payment_id: z.string(), preimage: z.string() }).openapi('DevInvoicePaid');
export const DevClockResponse = z.object({ now: UnixSeconds, offset_seconds: z.number().int(), held: z.boolean() }).openapi('DevClockResponse');

/**
 * Development-only routes: mounted by the gateway only when DEV_MODE is on (otherwise they answer 404)
 * and left out of the OpenAPI document.
 */
export const devRoutes = defineRoutes([
  {
    id: 'dev.clock',
    method: 'post',
    path: '/dev/clock',
    auth: 'admin',
    devOnly: true,
    bodyOptional: true,
    summary: 'Read the test clock, move it forward by advance_seconds, or hold it still (all services follow)',
    // Billing answers within 20 s of the move, even when the sweep after it takes longer.
    body: DevClockRequest,
    response: DevClockResponse,
    subject: 'billing.dev.clock',
    busTimeoutMs: 30_000,
  },
  {
    id: 'dev.payments.pay',
    method: 'post',
    path: '/dev/payments/{id}/pay',
    auth: 'none',
    devOnly: true,
    summary: 'Pay a pending payment of the dev Lightning provider, as a subscriber would',
    params: IdParams,
    response: Payment,
    subject: 'payments.dev.pay',
  },
  {
    id: 'dev.invoices.pay',
    method: 'post',
    path: '/dev/invoices/{payment_hash}/pay',
    auth: 'none',
    devOnly: true,
    summary: 'Pay a dev Lightning invoice by its payment hash and learn its preimage, as a paying wallet (an NWC test wallet) would',
    params: DevInvoiceParams,
    response: DevInvoicePaid,
    subject: 'payments.dev.pay_invoice',
  },
] as const);
