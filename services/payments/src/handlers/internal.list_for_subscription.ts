import { messages } from '@sb/contracts';
import { messageHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { bip21Uri } from '../domain/checkout.js';
import { toPayment } from '../domain/payments.js';

/** A subscription's payment history, newest first (billing answers `GET /subscriptions/{id}/payments` with it). */
export const listSubscriptionPaymentsHandler = (d: Deps) =>
  messageHandler(messages.listSubscriptionPayments, async (req) => {
    const page = await d.payments.list(
      d.db,
      req.wallet_id,
      { subscription_id: req.subscription_id, ...(req.purpose ? { purpose: req.purpose } : {}) },
      req.limit,
      req.offset,
    );
    return { ...page, items: page.items.map(toPayment) };
  });

/** The portal's payment history: receipts, and for an open payment what pays it (no QR code: the page draws it). */
export const listPortalPaymentsHandler = (d: Deps) =>
  messageHandler(messages.listPortalPayments, async (req) => {
    const page = await d.payments.list(d.db, req.wallet_id, { subscription_ids: req.subscription_ids }, req.limit, req.offset);
    return {
      ...page,
      items: page.items.map((r) => ({
        ...toPayment(r),
        plan_name: r.plan_name,
        expires_at: r.expires_at,
        checkout_url: r.checkout_url,
        bip21_uri: r.onchain_address ? bip21Uri(r.onchain_address, r.amount_sats, r.payment_request) : null,
      })),
    };
  });
