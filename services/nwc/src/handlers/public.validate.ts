import { routeHandler } from '@sb/runtime';
import { ConnectionStringError } from '../connection-string.js';
import type { Deps } from '../deps.js';
import { WalletCheckError } from '../nip47.js';

/** An unusable string is an answer, not an error: `valid` false with the sentence saying why. */
export const validate = (d: Deps) =>
  routeHandler('public.nwc.validate', async (req) => {
    try {
      await d.nip47.validate(req.body.nwc_string);
      return { valid: true };
    } catch (err) {
      if (err instanceof ConnectionStringError || err instanceof WalletCheckError) return { valid: false, error: err.message };
      throw err;
    }
  });
