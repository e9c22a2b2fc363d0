import { notificationMessages } from '@sb/contracts';
import { type BusClient, callMessage, type Logger, within } from '@sb/runtime';
import { clean } from './domain/messages.js';

/**
 * How long a notice waits for its wallet's name: a batch of notices (200, 16 at a time) waiting the whole
 * bus timeout each on a slow gateway would outlast JetStream's ack wait and be delivered again.
 */
const NAME_WAIT_MS = 1_500;
/** A wallet whose name could not be had is not asked again for this long: its notices go unnamed at once. */
const RETRY_AFTER_MS = 30_000;

/**
 * Wallets' names, asked from the gateway (where wallets live) and kept: a name never changes (the wallet
 * tool has no rename). A wallet whose name cannot be had now (gateway away or older than this message)
 * goes unnamed for this message, as before: the notice is not held back. Callers of one wallet at once
 * share one question, each waiting as long as it can afford; an answer arriving later is kept for the next.
 */
export class WalletNames {
  private readonly known = new Map<string, string>();
  private readonly asking = new Map<string, Promise<string | null>>();
  private readonly failedAt = new Map<string, number>();

  constructor(
    private readonly bus: BusClient,
    private readonly log: Pick<Logger, 'warn'>,
  ) {}

  of(walletId: string, waitMs = NAME_WAIT_MS): Promise<string | null> {
    const hit = this.known.get(walletId);
    if (hit !== undefined) return Promise.resolve(hit);
    const failed = this.failedAt.get(walletId);
    if (failed !== undefined && Date.now() - failed < RETRY_AFTER_MS) return Promise.resolve(null);
    let asked = this.asking.get(walletId);
    if (!asked) {
      asked = this.ask(walletId).finally(() => this.asking.delete(walletId));
      this.asking.set(walletId, asked);
    }
    return within(asked, waitMs, () => {
      // Said once per miss: later callers skip the question until RETRY_AFTER_MS, or its late answer.
      if (!this.failedAt.has(walletId)) this.log.warn({ wallet_id: walletId }, `wallet name not answered in ${waitMs} ms: named by no merchant`);
      this.failedAt.set(walletId, Date.now());
      return null;
    });
  }

  /** Never rejects: null when the gateway could not answer. */
  private async ask(walletId: string): Promise<string | null> {
    try {
      // Given to the wallet tool, never checked as names shown to people are: one plain line here.
      const name = clean((await callMessage(this.bus, notificationMessages.walletName, { wallet_id: walletId })).name);
      this.known.set(walletId, name);
      this.failedAt.delete(walletId);
      return name;
    } catch (err) {
      if (!this.failedAt.has(walletId)) this.log.warn({ err: (err as Error).message, wallet_id: walletId }, 'wallet name not known: named by no merchant');
      this.failedAt.set(walletId, Date.now());
      return null;
    }
  }
}
