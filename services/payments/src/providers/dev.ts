import { randomBytes } from 'node:crypto';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { ripemd160 } from '@noble/hashes/legacy.js';
import { bech32 } from '@scure/base';
import { unixSeconds, type Clock } from '@sb/runtime';
import { encodeBolt11 } from './bolt11.js';
import type { CreateInvoiceInput, Invoice, LightningProvider } from './lightning.js';
import type { PayerReturnUrl, Rail } from './rail.js';

/**
 * DEV PROVIDER: for local runs and tests only; no money moves. It issues well-formed, correctly signed
 * BOLT11 invoices from a node key made up at process start (no route leads to it, so a real wallet cannot
 * pay them). A payment is "paid" through the dev-only endpoint (`POST /dev/payments/{id}/pay`, DEV_MODE),
 * which records it through the same confirmation path as the real providers. It keeps no state of its
 * own: an invoice exists only as its payment's row, so restarts lose nothing.
 */
export class DevLightningProvider implements LightningProvider {
  readonly name = 'dev' as const;
  private readonly nodeKey = secp256k1.utils.randomSecretKey();
  readonly nodePubkey = secp256k1.getPublicKey(this.nodeKey, true);

  constructor(
    private readonly clock: Clock,
    /** Status of the payment this provider knows by `ref`, from the payments table. */
    private readonly statusOf: (ref: string) => Promise<string | undefined>,
  ) {}

  async createInvoice(input: CreateInvoiceInput): Promise<Invoice> {
    const preimage = randomBytes(32);
    const paymentHash = sha256(preimage);
    const now = unixSeconds(this.clock);
    const payment_request = encodeBolt11(
      {
        amount_sats: input.amount_sats,
        timestamp: now,
        payment_hash: paymentHash,
        payment_secret: randomBytes(32),
        description: `[dev] ${input.memo}`,
        expiry_seconds: input.expiry_seconds,
        min_final_cltv_expiry: 18,
      },
      this.nodeKey,
    );
    const payment_hash = Buffer.from(paymentHash).toString('hex');
    return {
      payment_request,
      payment_hash,
      provider_ref: payment_hash,
      expires_at: now + input.expiry_seconds,
      dev_preimage: preimage.toString('hex'),
    };
  }

  async getStatus(providerRef: string): Promise<{ paid: boolean }> {
    return { paid: (await this.statusOf(providerRef)) === 'paid' };
  }
}

/** A well-formed mainnet P2WPKH address of a random key nobody holds (BIP173). */
export function devOnchainAddress(): string {
  const pubkey = secp256k1.getPublicKey(secp256k1.utils.randomSecretKey(), true);
  return bech32.encode('bc', [0, ...bech32.toWords(ripemd160(sha256(pubkey)))]);
}

/**
 * DEV PROVIDER rails for on-chain, card and wallet-processor payments: an unused address, or a
 * checkout URL (the checkout page's stand-in for a processor's page). As with dev invoices, nothing can pay them but
 * `POST /dev/payments/{id}/pay` (DEV_MODE), through the same confirmation path as real providers.
 */
export function devRails(clock: Clock, devPayUrl: PayerReturnUrl): Rail[] {
  const expiry = (s: number) => unixSeconds(clock) + s;
  return [
    {
      method: 'onchain',
      provider: 'dev',
      needsFiat: false,
      async open(req) {
        const address = devOnchainAddress();
        return { provider_ref: address, onchain_address: address, expires_at: expiry(req.expiry_seconds) };
      },
    },
    {
      method: 'cardproc',
      provider: 'dev',
      needsFiat: true,
      async open(req) {
        return { provider_ref: `cs_dev_${req.payment_id}`, checkout_url: devPayUrl(req), expires_at: expiry(req.expiry_seconds) };
      },
    },
    {
      method: 'walletproc',
      provider: 'dev',
      needsFiat: true,
      async open(req) {
        return { provider_ref: `order_dev_${req.payment_id}`, checkout_url: devPayUrl(req), expires_at: expiry(req.expiry_seconds) };
      },
    },
  ];
}
