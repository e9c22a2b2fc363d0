import QRCode, { type QRCodeSegment } from 'qrcode';
import type { CreatedPayment } from '@sb/contracts';
import type { PaymentRecord } from './payments.js';
import { useFastQrMask } from './qr-mask.js';

type Checkout = CreatedPayment['checkout'];

/** QR code's alphanumeric mode: 5.5 bits a character instead of 8. */
const ALPHANUMERIC_RUN = /[0-9A-Z $%*+\-./:]{16,}/g;

/**
 * The text cut into QR segments: long upper-case runs (an invoice, a bech32 address) in alphanumeric
 * mode, the rest in byte mode. The library finds the optimal cut itself, but with a shortest-path search
 * that took two thirds of a checkout's CPU in payments; a run of 16 or more characters pays for the
 * extra segment header, so this cut is as dense for the texts we encode.
 */
export function qrSegments(text: string): QRCodeSegment[] {
  const segments: QRCodeSegment[] = [];
  let at = 0;
  for (const m of text.matchAll(ALPHANUMERIC_RUN)) {
    if (m.index > at) segments.push({ data: Buffer.from(text.slice(at, m.index)), mode: 'byte' });
    segments.push({ data: m[0], mode: 'alphanumeric' });
    at = m.index + m[0].length;
  }
  if (at < text.length) segments.push({ data: Buffer.from(text.slice(at)), mode: 'byte' });
  return segments;
}

useFastQrMask();
const svg = (text: string) => QRCode.toString(qrSegments(text), { type: 'svg', errorCorrectionLevel: 'M', margin: 2 });

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
    // URI schemes are case-insensitive: upper case keeps the whole code in alphanumeric mode.
    if (r.payment_request) qr_codes.lightning = await svg(`LIGHTNING:${r.payment_request.toUpperCase()}`);
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
