import { isStorableText } from '@sb/contracts';
import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { devPay } from './dev.pay.js';
import { devPayInvoice } from './dev.pay_invoice.js';
import { confirmPreimageHandler } from './internal.confirm_preimage.js';
import { createPaymentHandler, createPaymentsHandler } from './internal.create_payment.js';
import { fiatQuoteHandler } from './internal.fiat_quote.js';
import { paymentMethodsHandler } from './internal.methods.js';
import { expireOpenPaymentsHandler, markAppliedHandler, markUnappliedHandler } from './internal.expire_open.js';
import { listPortalPaymentsHandler, listSubscriptionPaymentsHandler } from './internal.list_for_subscription.js';
import { getPayment, getPaymentInternal } from './payments.get.js';
import { listPayments } from './payments.list.js';
import { getPaymentStatus } from './public.payment_status.js';
import { createWatchonlyWallet, getWatchonlyWallet, listWatchonlyWallets, watchonlyWalletExists } from './watchonly_wallets.js';
import type { CallbackRoute, PaymentLookup } from '../providers/callback.js';
import { chargeServerCallbacks } from '../providers/chargeproc.js';
import { callbackHandler } from './webhooks.js';

/** Every subject this service answers. */
export const allHandlers = (d: Deps): Handler[] => [
  createPaymentHandler(d),
  createPaymentsHandler(d),
  confirmPreimageHandler(d),
  expireOpenPaymentsHandler(d),
  markUnappliedHandler(d),
  markAppliedHandler(d),
  listSubscriptionPaymentsHandler(d),
  listPortalPaymentsHandler(d),
  fiatQuoteHandler(d),
  paymentMethodsHandler(d),
  listPayments(d),
  getPayment(d),
  getPaymentInternal(d),
  getPaymentStatus(d),
  createWatchonlyWallet(d),
  listWatchonlyWallets(d),
  getWatchonlyWallet(d),
  watchonlyWalletExists(d),
  ...callbackHandlers(d),
  ...(d.devMode ? [devPay(d), devPayInvoice(d)] : []),
];

/**
 * The callback routes: the charge-server route always (its rails are asked for the status; the POST and
 * its GET twin share one subject), the card and wallet-processor routes by the selected provider's reader.
 */
function callbackHandlers(d: Deps): Handler[] {
  // Ids read from a callback's body: one PostgreSQL cannot hold (NUL) names no payment, and asking would be an error (a 500).
  const lookup: PaymentLookup = {
    getById: async (id) => (isStorableText(id) ? d.payments.getById(d.db, id) : undefined),
    byProviderRef: async (p, ref) => (isStorableText(ref) ? d.payments.byProviderRef(d.db, p, ref) : undefined),
  };
  const readers = new Map(d.providers.flatMap((p) => (p.callback ? [[p.callback.route, p.callback.reader(d.rails, lookup, d.log)] as const] : [])));
  const routes: CallbackRoute[] = ['webhooks.cardproc', 'webhooks.walletproc'];
  return [
    callbackHandler(d, 'webhooks.chargeproc', chargeServerCallbacks(d.rails, lookup, d.log)),
    ...routes.map((r) => callbackHandler(d, r, readers.get(r))),
  ];
}
