import { randomBytes } from 'node:crypto';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { encodeBolt11 } from '../../src/providers/bolt11.js';
import { isInt, startFakeServer, type FakeServer } from './http-fake.js';

export interface LnbitsInvoice {
  payment_hash: string;
  payment_request: string;
  checking_id: string;
  amount: number;
  memo: string;
  expiry: number;
  webhook?: string;
  paid: boolean;
  preimage: string;
}

export interface LnbitsServer extends FakeServer {
  invoiceKey: string;
  invoices: Map<string, LnbitsInvoice>;
  /** The payer pays: the invoice is settled from now on. */
  pay(paymentHash: string): void;
}

/**
 * The LNbits wallet API as far as an invoice-issuing client uses it: `POST /api/v1/payments` with
 * `out: false` creates an incoming invoice, `GET /api/v1/payments/{payment_hash}` tells whether it is
 * paid. Both need `X-Api-Key` (the wallet's invoice key); LNbits answers 401 without a valid one and a
 * FastAPI 422 for a bad body.
 */
export async function startLnbitsServer(invoiceKey = randomBytes(16).toString('hex')): Promise<LnbitsServer> {
  const invoices = new Map<string, LnbitsInvoice>();
  const nodeKey = secp256k1.utils.randomSecretKey();
  const fake = await startFakeServer((req) => {
    if (req.headers['x-api-key'] !== invoiceKey) return { status: 401, body: { detail: 'Invalid key' } };
    if (req.method === 'POST' && req.path === '/api/v1/payments') {
      const b = req.body as Record<string, unknown> | undefined;
      const problems: string[] = [];
      if (b?.out !== false) problems.push('out');
      if (!isInt(b?.amount) || b.amount <= 0) problems.push('amount');
      if (typeof b?.memo !== 'string') problems.push('memo');
      if (b?.expiry !== undefined && (!isInt(b.expiry) || b.expiry <= 0)) problems.push('expiry');
      if (b?.webhook !== undefined && typeof b.webhook !== 'string') problems.push('webhook');
      if (problems.length || !b) {
        return { status: 422, body: { detail: problems.map((p) => ({ loc: ['body', p], msg: 'invalid', type: 'value_error' })) } };
      }
      const preimage = randomBytes(32);
      const hash = sha256(preimage);
      const payment_hash = Buffer.from(hash).toString('hex');
      const payment_request = encodeBolt11(
        {
          amount_sats: fake.faults.billsSats ?? (b.amount as number),
          timestamp: Math.floor(Date.now() / 1000),
          payment_hash: hash,
          payment_secret: randomBytes(32),
          description: b.memo as string,
          expiry_seconds: (b.expiry as number | undefined) ?? 3600,
        },
        nodeKey,
      );
      const inv: LnbitsInvoice = {
        payment_hash,
        payment_request,
        checking_id: payment_hash,
        amount: fake.faults.billsSats ?? (b.amount as number),
        memo: b.memo as string,
        expiry: (b.expiry as number | undefined) ?? 3600,
        ...(typeof b.webhook === 'string' ? { webhook: b.webhook } : {}),
        paid: false,
        preimage: Buffer.from(preimage).toString('hex'),
      };
      invoices.set(payment_hash, inv);
      return { status: 201, body: { payment_hash, payment_request, checking_id: payment_hash, lnurl_response: null } };
    }
    const m = req.method === 'GET' && /^\/api\/v1\/payments\/([0-9a-f]{64})$/.exec(req.path);
    if (m) {
      const inv = invoices.get(m[1]!);
      if (!inv) return { status: 404, body: { detail: 'Payment does not exist.' } };
      return {
        status: 200,
        body: {
          paid: inv.paid,
          preimage: inv.paid ? inv.preimage : null,
          details: { checking_id: inv.checking_id, pending: !inv.paid, amount: inv.amount * 1000, memo: inv.memo, bolt11: inv.payment_request },
        },
      };
    }
    return undefined;
  });
  return {
    ...fake,
    invoiceKey,
    invoices,
    pay(hash) {
      const inv = invoices.get(hash);
      if (!inv) throw new Error(`no invoice ${hash}`);
      inv.paid = true;
    },
  };
}
