import { z } from './zod.js';
import { Id, IdParams, Paginated, PaginationQuery, UnixSeconds } from './common.js';
import { defineRoutes } from './http.js';

/** Body of `POST /watchonly-wallets`. */
export const WatchonlyWalletCreate = z
  .strictObject({
    name: z.string().trim().min(1).max(100),
    xpub: z.string().trim().min(1).max(200).openapi({
      description: 'Account-level extended public key (zpub/vpub for BIP84 native segwit; an xpub/tpub is read as native segwit too). Never a private key.',
    }),
  })
  .openapi('WatchonlyWalletCreate');
export type WatchonlyWalletCreate = z.infer<typeof WatchonlyWalletCreate>;

/** The extended key itself is never returned: it reveals every address of the wallet. */
export const WatchonlyWallet = z
  .object({
    id: Id,
    name: z.string(),
    key_type: z.enum(['xpub', 'zpub', 'tpub', 'vpub']),
    network: z.enum(['mainnet', 'testnet']),
    first_address: z.string().openapi({ description: 'Receive address m/0/0 (P2WPKH), to check against the wallet' }),
    created_at: UnixSeconds,
  })
  .openapi('WatchonlyWallet');
export type WatchonlyWallet = z.infer<typeof WatchonlyWallet>;

/** The owner's watch-only wallets: on-chain payments of plans naming one go to fresh addresses of it. */
export const watchonlyRoutes = defineRoutes([
  {
    id: 'watchonly_wallets.create',
    method: 'post',
    path: '/watchonly-wallets',
    auth: 'admin',
    summary: 'Register a watch-only wallet (extended public key) to receive on-chain payments',
    body: WatchonlyWalletCreate,
    response: WatchonlyWallet,
    status: 201,
    subject: 'payments.watchonly_wallets.create',
  },
  {
    id: 'watchonly_wallets.list',
    method: 'get',
    path: '/watchonly-wallets',
    auth: 'invoice',
    summary: "List the wallet's watch-only wallets",
    query: PaginationQuery,
    response: Paginated(WatchonlyWallet),
    subject: 'payments.watchonly_wallets.list',
  },
  {
    id: 'watchonly_wallets.get',
    method: 'get',
    path: '/watchonly-wallets/{id}',
    auth: 'invoice',
    summary: 'Read a watch-only wallet',
    params: IdParams,
    response: WatchonlyWallet,
    subject: 'payments.watchonly_wallets.get',
  },
] as const);
