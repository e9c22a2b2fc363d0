import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { devPay } from './dev.pay.js';
import { devPayInvoice } from './dev.pay_invoice.js';
import { confirmPreimageHandler } from './internal.confirm_preimage.js';
import { createPaymentHandler } from './internal.create_payment.js';
import { fiatQuoteHandler } from './internal.fiat_quote.js';
import { expireOpenPaymentsHandler } from './internal.expire_open.js';
import { listPortalPaymentsHandler, listSubscriptionPaymentsHandler } from './internal.list_for_subscription.js';
import { getPayment } from './payments.get.js';
import { listPayments } from './payments.list.js';
import { getPaymentStatus } from './public.payment_status.js';
import { createWatchonlyWallet, getWatchonlyWallet, listWatchonlyWallets, watchonlyWalletExists } from './watchonly_wallets.js';
import { StripeCardRail } from '../providers/cardproc.js';
import { cardprocWebhook } from './webhooks.cardproc.js';
import { chargeprocWebhook } from './webhooks.chargeproc.js';
import { paypalOf } from '../providers/walletproc.js';
import { walletprocWebhook } from './webhooks.walletproc.js';

/**
 * Every subject this service answers. The cardproc and walletproc callbacks only with a real provider on
 * that rail (otherwise their subjects stay unanswered, so the gateway says 503).
 */
export const allHandlers = (d: Deps): Handler[] => [
  createPaymentHandler(d),
  confirmPreimageHandler(d),
  expireOpenPaymentsHandler(d),
  listSubscriptionPaymentsHandler(d),
  listPortalPaymentsHandler(d),
  fiatQuoteHandler(d),
  listPayments(d),
  getPayment(d),
  getPaymentStatus(d),
  createWatchonlyWallet(d),
  listWatchonlyWallets(d),
  getWatchonlyWallet(d),
  watchonlyWalletExists(d),
  // One handler for both routes: the POST callback and its GET twin share `payments.webhooks.chargeproc`.
  chargeprocWebhook(d),
  // Only with the Stripe rail: without it the subject stays unanswered and the gateway says 503.
  ...(d.rails.cardproc instanceof StripeCardRail ? [cardprocWebhook(d, d.rails.cardproc)] : []),
  // Only with the PayPal rail, likewise.
  ...(paypalOf(d.rails) ? [walletprocWebhook(d)] : []),
  ...(d.devMode ? [devPay(d), devPayInvoice(d)] : []),
];
