import { messages } from '@sb/contracts';
import { messageHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';

/** A plan's price in fiat at the current rate (the checkout page shows it beside the sats). */
export const fiatQuoteHandler = (d: Deps) =>
  messageHandler(messages.fiatQuote, async ({ amount_sats }) => {
    const q = await d.rates.quote(amount_sats);
    return { amount: q.amount, currency: q.currency };
  });
