import { randomBytes } from 'node:crypto';
import { messages, type WebhookDelivery, type WebhookEndpoint } from '@sb/contracts';
import { answerOnce, callMessage, conflict, newId, notFound, routeHandler, unixSeconds, walletOf, type Handler, invalid, type Queryable } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { checkWebhookUrl, UrlNotAllowed } from '@sb/runtime';
import { DELIVERY_ID_PREFIX } from '../events-consumer.js';
import type { DeliveryAttempt, DeliveryRecord } from '../store/deliveries.repo.js';
import type { EndpointRecord } from '../store/endpoints.repo.js';

/**
 * Endpoints a wallet may have at once (as Stripe's 16): with the delivery worker's share per slow
 * endpoint, one owner's receivers that never answer cannot take all its places (found from outside).
 */
export const MAX_ENDPOINTS_PER_WALLET = 16;

const ENDPOINT_ID_PREFIX = 'whe_';

/** The resource as the API shows it: never the secret. */
/**
 * Credentials in an endpoint's URL (accepted before they were refused) are not shown: every reader of the
 * endpoint, the invoice key too, would see them. Deliveries still use the stored URL.
 */
const shownUrl = (url: string): string => url.replace(/^(https?:\/\/)[^@/?#]*@/i, '$1***@');

const toEndpoint = (r: EndpointRecord): WebhookEndpoint => ({
  id: r.id,
  url: shownUrl(r.url),
  events: r.events,
  plan_id: r.plan_id,
  description: r.description,
  created_at: r.created_at,
});

const toDelivery = (r: DeliveryRecord, attempts: DeliveryAttempt[]): WebhookDelivery => ({
  id: r.id,
  endpoint_id: r.endpoint_id,
  event_id: r.event_id,
  event: r.event,
  status: r.status,
  attempt_count: r.attempt_count,
  last_status_code: r.last_status_code,
  last_error: r.last_error,
  next_attempt_at: r.next_attempt_at,
  delivered_at: r.delivered_at,
  replay_of: r.replay_of,
  created_at: r.created_at,
  attempts,
});

/**
 * `withDeleted`: a deleted endpoint of the wallet too, for its deliveries log (what was never delivered
 * stays visible to its owner: found from outside, a 404 hid it).
 */
async function ownEndpoint(d: Deps, walletId: string, id: string, withDeleted = false): Promise<EndpointRecord> {
  const ep = await d.endpoints.get(d.db, walletId, id, withDeleted);
  if (!ep) throw notFound('Webhook endpoint');
  return ep;
}

export const webhookEndpointHandlers = (d: Deps): Handler[] => [
  // The secret is left out of the recorded answer (the route's shownOnce): a retry answers the endpoint without it.
  answerOnce(d.answered, d.db, 'webhook_endpoints.create', async (req, keep) => {
    const body = req.body;
    try {
      await checkWebhookUrl(body.url, d.addresses);
    } catch (err) {
      if (err instanceof UrlNotAllowed) throw invalid(['url'], `url ${err.message}`);
      throw err;
    }
    // A plan of another wallet (or none) is not found, as for ids in paths: no endpoint hears of it.
    if (body.plan_id && !(await callMessage(d.bus, messages.planExists, { wallet_id: walletOf(req), id: body.plan_id })).exists) {
      throw notFound('Plan');
    }
    // Standard Webhooks: whsec_ + base64 of the HMAC key; 24 random bytes = 192 bits.
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const nowMs = d.clock.nowMs();
    const record: EndpointRecord = {
      id: newId(ENDPOINT_ID_PREFIX, nowMs),
      wallet_id: walletOf(req),
      url: body.url,
      events: body.events ? [...new Set(body.events)] : null,
      plan_id: body.plan_id ?? null,
      description: body.description ?? null,
      secret_sealed: d.secrets.seal(secret),
      created_at: Math.floor(nowMs / 1000),
    };
    const insert = async (tx: Queryable) => {
      if (!(await d.endpoints.insertWithin(tx, record, MAX_ENDPOINTS_PER_WALLET))) {
        throw conflict(`A wallet can have at most ${MAX_ENDPOINTS_PER_WALLET} webhook endpoints: delete one it no longer needs first`);
      }
      return { ...toEndpoint(record), secret };
    };
    // The count and the insert need one transaction, with a key or without (keep.write is for one statement).
    return d.db.tx(async (tx) => keep(tx, await insert(tx)));
  }),

  routeHandler('webhook_endpoints.list', async (req) => {
    const { limit, offset } = req.query;
    const page = await d.endpoints.list(d.db, walletOf(req), limit, offset);
    return { ...page, items: page.items.map(toEndpoint) };
  }),

  routeHandler('webhook_endpoints.get', async (req) => toEndpoint(await ownEndpoint(d, walletOf(req), req.params.id))),

  routeHandler('webhook_endpoints.delete', async (req) => {
    const deleted = await d.db.tx((tx) => d.endpoints.delete(tx, walletOf(req), req.params.id, unixSeconds(d.clock)));
    if (!deleted) throw notFound('Webhook endpoint');
    return { success: true, message: 'Webhook endpoint deleted' };
  }),

  routeHandler('webhook_deliveries.list', async (req) => {
    const ep = await ownEndpoint(d, walletOf(req), req.params.id, true);
    const { limit, offset } = req.query;
    const page = await d.deliveries.list(d.db, ep.id, limit, offset);
    const attempts = await d.deliveries.attemptsOf(
      d.db,
      page.items.map((r) => r.id),
    );
    return { ...page, items: page.items.map((r) => toDelivery(r, attempts.get(r.id) ?? [])) };
  }),

  answerOnce(d.answered, d.db, 'webhook_deliveries.replay', async (req, keep) => {
    const ep = await ownEndpoint(d, walletOf(req), req.params.id);
    const original = await d.deliveries.get(d.db, ep.id, req.params.delivery_id);
    if (!original) throw notFound('Webhook delivery');
    const nowMs = d.clock.nowMs();
    const id = newId(DELIVERY_ID_PREFIX, nowMs);
    const now = Math.floor(nowMs / 1000);
    const replay = { id, endpoint_id: ep.id, wallet_id: original.wallet_id, event_id: original.event_id, event: original.event, body: original.body };
    return keep.write(d.db, async (q) => {
      // The same body and event id: receivers that dedupe on webhook-id see the replay as the same event.
      await d.deliveries.record(q, { ...replay, now, replay_of: original.id });
      // The answer is the row as written: read back outside a transaction, the worker could have sent it meanwhile.
      return toDelivery(
        {
          ...replay,
          status: 'pending',
          attempt_count: 0,
          last_status_code: null,
          last_error: null,
          next_attempt_at: now,
          delivered_at: null,
          first_attempt_at: null,
          replay_of: original.id,
          created_at: now,
        },
        [],
      );
    });
  }),
];
