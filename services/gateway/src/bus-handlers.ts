import { notificationMessages } from '@sb/contracts';
import { messageHandler, notFound, type Queryable } from '@sb/runtime';
import type { WalletsRepo } from './store/wallets.repo.js';

/**
 * The one message the gateway answers: a wallet's name, for the notifier to name the merchant when the
 * owner saved none (wallets live here only).
 */
export const walletName = (db: Queryable, wallets: WalletsRepo) =>
  messageHandler(notificationMessages.walletName, async ({ wallet_id }) => {
    const name = await wallets.nameOf(db, wallet_id);
    if (name === undefined) throw notFound('Wallet');
    return { name };
  });
