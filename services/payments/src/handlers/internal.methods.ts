import { messages } from '@sb/contracts';
import { messageHandler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { methodAvailability } from '../domain/availability.js';

/** What this deployment's rails take: billing asks instead of reading the *_PROVIDER variables itself. */
export const paymentMethodsHandler = (d: Deps) =>
  messageHandler(messages.paymentMethods, async () => ({
    methods: methodAvailability((m) => !!d.rails[m]),
    watchonly_required: d.providers.some((p) => p.selectedBy === 'ONCHAIN_PROVIDER' && p.name === 'esplora'),
  }));
