import QRCode from 'qrcode';
import type { CreatedPayment } from '@sb/contracts';
import type { PaymentRecord } from './payments.js';

type Checkout = CreatedPayment['checkout'];

/**
 * What a payer needs to pay: the invoice and, for a checkout page, a QR code of it (`lightning:` URI,
 * invoice upper-cased so the QR code uses the denser alphanumeric mode). Renewal payments go out in
 * reminders and are made by the thousand in a sweep, so they carry no QR code.
 */
export async function checkoutOf(r: PaymentRecord): Promise<Checkout> {
  const qr_codes: Record<string, string> = {};
  if (r.payment_request && r.purpose === 'checkout') {
    qr_codes.lightning = await QRCode.toString(`lightning:${r.payment_request.toUpperCase()}`, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 });
  }
  return {
    payment_id: r.id,
    payment_method: r.payment_method,
    subscription_id: r.subscription_id,
    payment_request: r.payment_request,
    payment_hash: r.payment_hash,
    ...(r.provider === 'chargeproc' ? { chargeproc_charge_id: r.provider_ref } : {}),
    qr_codes,
    expires_at: r.expires_at,
  };
}
