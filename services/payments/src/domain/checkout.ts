import QRCode from 'qrcode';
import type { CreatedPayment } from '@sb/contracts';
import type { PaymentRecord } from './payments.js';

type Checkout = CreatedPayment['checkout'];

const svg = (text: string) => QRCode.toString(text, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 });

/** BTC with 8 decimals, as BIP21's `amount`. */
function btcAmount(sats: number): string {
  return (BigInt(sats) / 100_000_000n).toString() + '.' + (BigInt(sats) % 100_000_000n).toString().padStart(8, '0');
}

/** `bitcoin:<address>?amount=<btc>[&lightning=<bolt11>]` (BIP21, unified with a Lightning fallback). */
export function bip21Uri(address: string, sats: number, bolt11?: string | null, upper = false): string {
  // Bech32 addresses and invoices may be upper-cased (denser QR codes); base58 addresses are case-sensitive.
  const addr = upper && /^(bc|tb|bcrt)1/i.test(address) ? address.toUpperCase() : address;
  return `bitcoin:${addr}?amount=${btcAmount(sats)}${bolt11 ? `&lightning=${upper ? bolt11.toUpperCase() : bolt11}` : ''}`;
}

/**
 * What a payer needs to pay: the invoice, address or processor checkout link, and for a checkout page QR
 * codes (address and invoice upper-cased so the codes use the denser alphanumeric mode). Renewal
 * payments go out in reminders and are made by the thousand in a sweep, so they carry no QR code.
 */
export async function checkoutOf(r: PaymentRecord): Promise<Checkout> {
  const qr_codes: Record<string, string> = {};
  const bip21 = r.onchain_address ? bip21Uri(r.onchain_address, r.amount_sats, r.payment_request) : null;
  if (r.purpose === 'checkout') {
    if (r.payment_request) qr_codes.lightning = await svg(`lightning:${r.payment_request.toUpperCase()}`);
    if (r.onchain_address) {
      qr_codes.onchain = await svg(bip21Uri(r.onchain_address, r.amount_sats, null, true));
      if (r.payment_request) qr_codes.bip21 = await svg(bip21Uri(r.onchain_address, r.amount_sats, r.payment_request, true));
    }
  }
  return {
    payment_id: r.id,
    payment_method: r.payment_method,
    subscription_id: r.subscription_id,
    payment_request: r.payment_request,
    payment_hash: r.payment_hash,
    ...(r.onchain_address ? { onchain_address: r.onchain_address, bip21_uri: bip21 } : {}),
    ...(r.checkout_url ? { checkout_url: r.checkout_url } : {}),
    ...(r.amount_fiat !== null && r.currency ? { amount_fiat: r.amount_fiat, currency: r.currency } : {}),
    ...(r.provider === 'chargeproc' ? { chargeproc_charge_id: r.provider_ref } : {}),
    qr_codes,
    expires_at: r.expires_at,
  };
}
