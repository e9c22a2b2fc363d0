import { DomainError, routeHandler, type Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { devPay } from './dev.pay.js';
import { devPayInvoice } from './dev.pay_invoice.js';
import { confirmPreimageHandler } from './internal.confirm_preimage.js';
import { createPaymentHandler } from './internal.create_payment.js';
import { fiatQuoteHandler } from './internal.fiat_quote.js';
import { expireOpenPaymentsHandler, markUnappliedHandler } from './internal.expire_open.js';
import { listPortalPaymentsHandler, listSubscriptionPaymentsHandler } from './internal.list_for_subscription.js';
import { getPayment, getPaymentInternal } from './payments.get.js';
import { listPayments } from './payments.list.js';
import { getPaymentStatus } from './public.payment_status.js';
import { createWatchonlyWallet, getWatchonlyWallet, listWatchonlyWallets, watchonlyWalletExists } from './watchonly_wallets.js';
import { StripeCardRail } from '../providers/cardproc.js';
import { cardprocWebhook } from './webhooks.cardproc.js';
import { chargeprocWebhook } from './webhooks.chargeproc.js';
import { paypalOf } from '../providers/walletproc.js';
import { walletprocWebhook } from './webhooks.walletproc.js';

/**
 * A callback route whose rail has no real provider here (dev, or none): nothing can verify what arrives,
 * so it is refused as any unverifiable callback is (a 503 would tell the sender to retry forever).
 */
const unverifiable = (id: 'webhooks.cardproc' | 'webhooks.walletproc') =>
  routeHandler(id, async () => {
    throw new DomainError(400, 'Invalid callback');
  });

/** Every subject this service answers. */
export const allHandlers = (d: Deps): Handler[] => [
  createPaymentHandler(d),
  confirmPreimageHandler(d),
  expireOpenPaymentsHandler(d),
  markUnappliedHandler(d),
  listSubscriptionPaymentsHandler(d),
  listPortalPaymentsHandler(d),
  fiatQuoteHandler(d),
  listPayments(d),
  getPayment(d),
  getPaymentInternal(d),
  getPaymentStatus(d),
  createWatchonlyWallet(d),
  listWatchonlyWallets(d),
  getWatchonlyWallet(d),
  watchonlyWalletExists(d),
  // One handler for both routes: the POST callback and its GET twin share `payments.webhooks.chargeproc`.
  chargeprocWebhook(d),
  d.rails.cardproc instanceof StripeCardRail ? cardprocWebhook(d, d.rails.cardproc) : unverifiable('webhooks.cardproc'),
  paypalOf(d.rails) ? walletprocWebhook(d) : unverifiable('webhooks.walletproc'),
  ...(d.devMode ? [devPay(d), devPayInvoice(d)] : []),
];
