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
 * goes unnamed for this message, as before: the notice is not held back. Notices of one wallet at once
 * share one question; an answer arriving after the wait is still kept for the next.
 */
export class WalletNames {
  private readonly known = new Map<string, string>();
  private readonly asking = new Map<string, Promise<string | null>>();
  private readonly failedAt = new Map<string, number>();

  constructor(
    private readonly bus: BusClient,
    private readonly log: Pick<Logger, 'warn'>,
  ) {}

  of(walletId: string): Promise<string | null> {
    const hit = this.known.get(walletId);
    if (hit !== undefined) return Promise.resolve(hit);
    const failed = this.failedAt.get(walletId);
    if (failed !== undefined && Date.now() - failed < RETRY_AFTER_MS) return Promise.resolve(null);
    let asked = this.asking.get(walletId);
    if (!asked) {
      asked = this.ask(walletId).finally(() => this.asking.delete(walletId));
      this.asking.set(walletId, asked);
    }
    return asked;
  }

  private async ask(walletId: string): Promise<string | null> {
    // Given to the wallet tool, never checked as names shown to people are: one plain line here.
    const answer = callMessage(this.bus, notificationMessages.walletName, { wallet_id: walletId }).then((r) => {
      const name = clean(r.name);
      this.known.set(walletId, name);
      this.failedAt.delete(walletId);
      return name;
    });
    let late = false;
    const name = await within(
      answer.catch((err) => {
        // Said once: a question given up on is not logged again when it fails later.
        if (!late) this.log.warn({ err: (err as Error).message, wallet_id: walletId }, 'wallet name not known: the message names no merchant');
        return null;
      }),
      NAME_WAIT_MS,
      () => {
        late = true;
        this.log.warn({ wallet_id: walletId }, `wallet name not answered in ${NAME_WAIT_MS} ms: the message names no merchant`);
        return null;
      },
    );
    if (name === null && !this.known.has(walletId)) this.failedAt.set(walletId, Date.now());
    return name;
  }
}
