import { createHash } from 'node:crypto';
import { messages } from '@sb/contracts';
import { messageHandler, notFound, invalid } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { confirmPayment } from '../confirm.js';

/**
 * A preimage is the proof that a Lightning invoice was paid: whoever learnt it (an NWC wallet's answer)
 * can confirm the payment, but only through the same confirmation path as provider callbacks, and only
 * if it hashes to the invoice's payment hash. A wrong one is 422 and changes nothing.
 */
export const confirmPreimageHandler = (d: Deps) =>
  messageHandler(messages.confirmPreimage, async (req) => {
    const p = await d.payments.getById(d.db, req.payment_id);
    if (!p) throw notFound('Payment');
    const hash = createHash('sha256').update(Buffer.from(req.preimage, 'hex')).digest('hex');
    if (!p.payment_hash || hash !== p.payment_hash.toLowerCase()) {
      throw invalid(['preimage'], 'The preimage does not match the payment hash of this payment');
    }
    const { payment, confirmed } = await confirmPayment(d, p.id);
    if (confirmed) d.log.info({ payment_id: p.id, via: 'preimage' }, 'payment confirmed');
    return { payment_id: p.id, status: (payment ?? p).status, confirmed };
  });
