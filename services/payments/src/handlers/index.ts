import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { devPay } from './dev.pay.js';
import { createPaymentHandler } from './internal.create_payment.js';
import { expireOpenPaymentsHandler } from './internal.expire_open.js';
import { listSubscriptionPaymentsHandler } from './internal.list_for_subscription.js';
import { getPayment } from './payments.get.js';
import { listPayments } from './payments.list.js';
import { getPaymentStatus } from './public.payment_status.js';
import { chargeprocWebhook } from './webhooks.chargeproc.js';

/**
 * Every subject this service answers. Not in this version: the cardproc and walletproc callbacks (no
 * such provider is installed; their subjects stay unanswered, so the gateway says 503).
 */
export const allHandlers = (d: Deps): Handler[] => [
  createPaymentHandler(d),
  expireOpenPaymentsHandler(d),
  listSubscriptionPaymentsHandler(d),
  listPayments(d),
  getPayment(d),
  getPaymentStatus(d),
  // One handler for both routes: the POST callback and its GET twin share `payments.webhooks.chargeproc`.
  chargeprocWebhook(d),
  ...(d.devMode ? [devPay(d)] : []),
];
