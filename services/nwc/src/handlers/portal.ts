import { messages, portalRoutes, satsText, toPortalWallet, type BusRequest } from '@sb/contracts';
import { BusUnavailableError, callMessage, DomainError, notFound, routeHandler, unixSeconds, unauthenticated } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { answerBy, chargeConnection, tellBilling } from '../charge.js';
import { toConnection } from '../store/connections.repo.js';
import { checked, storeConnection, wellFormed } from './public.subscribe.js';

/** The token's subscriber, resolved by billing (which owns subscribers); an unknown token is 401. */
async function subscriberOf(d: Deps, req: BusRequest): Promise<{ subscriber_id: string; wallet_id: string }> {
  const hash = req.caller.subscriber_token_hash;
  if (!hash) throw unauthenticated('Invalid subscriber token');
  try {
    return await callMessage(d.bus, messages.subscriberOfToken, { token_hash: hash });
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'not_found') throw unauthenticated('Invalid subscriber token');
    throw err;
  }
}

/** How long the gateway waits for a connect (its route's bus wait): the wallet's answer to a first payment must come before. */
const CONNECT_WAIT_MS = portalRoutes.find((r) => r.id === 'portal.wallets.connect')?.busTimeoutMs;

export const listWallets = (d: Deps) =>
  routeHandler('portal.wallets.list', async (req) => {
    const s = await subscriberOf(d, req);
    const page = await d.connections.listOfSubscriber(d.db, s.wallet_id, s.subscriber_id, req.query.limit, req.query.offset);
    return { ...page, items: page.items.map((r) => toPortalWallet(toConnection(r), r)) };
  });

/** Another subscriber's wallet is 404, exactly like an unknown one. Disconnecting twice is fine. */
export const disconnectWallet = (d: Deps) =>
  routeHandler('portal.wallets.disconnect', async (req) => {
    const s = await subscriberOf(d, req);
    const row = await d.connections.disconnect(d.db, s.wallet_id, s.subscriber_id, req.params.id, unixSeconds(d.clock));
    if (!row) throw notFound('Wallet');
    d.log.info({ connection_id: row.id }, 'nwc wallet disconnected');
    await tellBilling(d, row);
    return { success: true, message: 'Wallet disconnected: it pays nothing more; any further renewal is paid by invoice.' };
  });

/**
 * A wallet connected in the portal to one of the subscriber's NWC subscriptions (billing checks which):
 * checked like a checkout's, stored with its secret sealed, replacing the subscription's earlier wallet;
 * it pays the renewals from now on, and a first payment still due at once (billing names it).
 */
export const connectWallet = (d: Deps) =>
  routeHandler('portal.wallets.connect', async (req) => {
    const by = answerBy(d, CONNECT_WAIT_MS, req.caller.answer_by);
    const s = await subscriberOf(d, req);
    const body = req.body;
    const target = { wallet_id: s.wallet_id, subscriber_id: s.subscriber_id, subscription_id: body.subscription_id, max_amount_sats: body.max_amount_sats };
    // Bad input is 422 whatever the subscription (found from outside: 409 for one paid by invoice first).
    wellFormed(body.nwc_connection_string);
    // Another subscriber's subscription is refused before any relay the caller named is contacted (by a
    // billing of an earlier version, without the check, after: as it was then).
    await callMessage(d.bus, messages.nwcReconnectCheck, target).catch((err) => {
      if (!(err instanceof BusUnavailableError && err.noResponders)) throw err;
    });
    const { conn, encryption } = await checked(d, body.nwc_connection_string);
    const sub = await callMessage(d.bus, messages.nwcReconnect, target);
    const row = await storeConnection(
      d,
      {
        wallet_id: s.wallet_id,
        subscriber_id: s.subscriber_id,
        subscription_id: body.subscription_id,
        plan_id: sub.plan_id,
        plan_name: sub.plan_name,
        max_amount_sats: body.max_amount_sats ?? null,
        subscriber_email: sub.subscriber_email,
        subscriber_name: sub.subscriber_name,
      },
      conn,
      encryption,
    );
    d.log.info({ connection_id: row.id, subscription_id: row.subscription_id, encryption }, 'nwc wallet connected in the portal');
    if (!sub.first_payment) return toPortalWallet(toConnection(row), row);
    // Waiting for its first payment: the wallet connected for it pays it now, as at an NWC checkout.
    const outcome = await chargeConnection(d, row, { ...sub.first_payment, purpose: 'checkout' }, by);
    // As it stands after the charge (its failure counted, or its last use).
    const stored = (await d.connections.get(d.db, row.id)) ?? row;
    const paid = `Your wallet paid the first payment of ${satsText(sub.first_payment.amount_sats)}`;
    return {
      ...toPortalWallet(toConnection(stored), stored),
      first_payment: outcome.paid
        ? {
            paid: true,
            message: outcome.confirmed ? `${paid}: the subscription is active in a moment.` : `${paid}: the subscription is active once it is confirmed.`,
          }
        : { paid: false, error_code: outcome.error_code, message: `Your wallet did not pay the first payment: ${outcome.message}` },
    };
  });
