import { isStorableText } from '@sb/contracts';
import { rejected, routeHandler, unixSeconds } from '@sb/runtime';
import { announceEnd, applyOutcome } from '../confirm.js';
import type { Deps } from '../deps.js';
import type { CallbackReader, CallbackRoute } from '../providers/callback.js';

/**
 * Every provider callback route, one way: the provider's reader verifies the callback and finds our
 * payment (providers/registry.ts names the reader of each route); an event id is recorded in the same
 * transaction as the payment's change, so a redelivery answers 200 and changes nothing, and
 * `{received: true}` means both are durable. A route whose provider is not configured here has nothing
 * that could verify what arrives: it is refused (a 503 would tell the sender to retry forever).
 */
export const callbackHandler = (d: Deps, route: CallbackRoute, reader: CallbackReader | undefined) =>
  routeHandler(route, async (req) => {
    if (!reader) throw rejected('Invalid callback');
    const event = await reader.read(req.body);
    if (!event) {
      d.log.debug({ provider: reader.provider, route }, 'callback with nothing for us; acknowledged');
      return { received: true };
    }
    const { payment, eventId } = event;
    // An event id that could not be recorded (NUL) is no provider's: refused, as a malformed callback is.
    if (eventId !== undefined && !isStorableText(eventId)) throw rejected('Invalid callback');
    if (eventId && (await d.payments.callbackRecorded(d.db, reader.provider, eventId))) return { received: true };
    // The provider's own status (no event id) is asked for at most once a second per payment: anyone can
    // send this callback. A check started after it arrived, made by another caller, answers for it.
    if (!eventId && !(await d.checks.turn(payment.id))) return { received: true };
    // Any call to the provider happens here, outside the transaction.
    const outcome = await event.outcome();
    // Acknowledged all the same: the provider would redeliver the same answer for ever.
    if ('warning' in outcome && outcome.warning) {
      d.log.warn({ payment_id: payment.id, provider: reader.provider, event_id: eventId, event: event.label, reason: outcome.warning }, 'callback not applied');
    }
    const change = await d.db.tx(async (tx) => {
      if (eventId && !(await d.payments.recordCallback(tx, reader.provider, eventId, payment.id, unixSeconds(d.clock)))) return null;
      return applyOutcome(d, tx, payment, outcome);
    });
    if (change) d.log.info({ payment_id: payment.id, provider: reader.provider, event_id: eventId, event: event.label, via: 'callback' }, `payment ${change}`);
    announceEnd(d, payment, change);
    return { received: true };
  });
