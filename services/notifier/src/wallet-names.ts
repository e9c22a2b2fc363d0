import { notificationMessages } from '@sb/contracts';
import { type BusClient, callMessage, type Logger } from '@sb/runtime';
import { clean } from './domain/messages.js';

/**
 * Wallets' names, asked from the gateway (where wallets live) and kept: a name never changes (the wallet
 * tool has no rename). A wallet whose name cannot be had now (gateway away or older than this message)
 * goes unnamed for this message, as before, and is asked again for the next: the notice is not held back.
 */
export class WalletNames {
  private readonly known = new Map<string, string>();

  constructor(
    private readonly bus: BusClient,
    private readonly log: Pick<Logger, 'warn'>,
  ) {}

  async of(walletId: string): Promise<string | null> {
    const hit = this.known.get(walletId);
    if (hit !== undefined) return hit;
    try {
      // Given to the wallet tool, never checked as names shown to people are: one plain line here.
      const name = clean((await callMessage(this.bus, notificationMessages.walletName, { wallet_id: walletId })).name);
      this.known.set(walletId, name);
      return name;
    } catch (err) {
      this.log.warn({ err: (err as Error).message, wallet_id: walletId }, 'wallet name not known: the message names no merchant');
      return null;
    }
  }
}
