import { randomBytes } from 'node:crypto';
import { secp256k1 } from '@noble/curves/secp256k1.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { encodeBolt11 } from '../../src/providers/bolt11.js';
import { devOnchainAddress } from '../../src/providers/dev.js';
import { isInt, startFakeServer, type FakeServer } from './http-fake.js';

/** A charge as SatsPay stores and answers it. */
export interface SatspayCharge {
  id: string;
  lnbitswallet: string | null;
  onchainwallet: string | null;
  description: string;
  onchainaddress: string | null;
  payment_request: string;
  payment_hash: string;
  webhook: string | null;
  completelink: string | null;
  completelinktext: string;
  time: number;
  amount: number;
  balance: number;
  pending: number;
  timestamp: number;
  extra: string;
}

export interface SatspayServer extends FakeServer {
  apiKey: string;
  wallet: string;
  /** The watch-only on-chain wallet charges may name as `onchainwallet`. */
  onchainWallet: string;
  charges: Map<string, SatspayCharge>;
  /** Money arrives on the charge (all of it unless said). */
  pay(id: string, sats?: number): void;
  /** The charge as its GET answers it (with the `paid` flag SatsPay derives). */
  chargeJson(id: string): SatspayCharge & { paid: boolean };
}

/**
 * The charge server (LNbits SatsPay extension) wire format: `POST /satspay/api/v1/charge` and
 * `GET /satspay/api/v1/charge/{id}`, both with `X-Api-Key`. A charge is paid when its balance covers
 * its amount.
 */
export async function startSatspayServer(
  apiKey = randomBytes(16).toString('hex'),
  wallet = randomBytes(11).toString('hex'),
  onchainWallet = randomBytes(11).toString('hex'),
): Promise<SatspayServer> {
  const charges = new Map<string, SatspayCharge>();
  const nodeKey = secp256k1.utils.randomSecretKey();
  const json = (c: SatspayCharge) => ({ ...c, paid: c.balance >= c.amount });
  const fake = await startFakeServer((req) => {
    if (req.headers['x-api-key'] !== apiKey) return { status: 401, body: { detail: 'Invalid key' } };
    if (req.method === 'POST' && req.path === '/satspay/api/v1/charge') {
      const b = req.body as Record<string, unknown> | undefined;
      const problems: string[] = [];
      if (typeof b?.lnbitswallet !== 'string' && typeof b?.onchainwallet !== 'string') problems.push('lnbitswallet');
      if (typeof b?.description !== 'string') problems.push('description');
      if (!isInt(b?.amount) || b.amount <= 0) problems.push('amount');
      if (!isInt(b?.time) || b.time < 1) problems.push('time');
      if (b?.webhook !== undefined && typeof b.webhook !== 'string') problems.push('webhook');
      if (b?.completelink !== undefined && typeof b.completelink !== 'string') problems.push('completelink');
      if (problems.length || !b) {
        return { status: 422, body: { detail: problems.map((p) => ({ loc: ['body', p], msg: 'invalid', type: 'value_error' })) } };
      }
      if (b.lnbitswallet !== undefined && b.lnbitswallet !== wallet) return { status: 404, body: { detail: 'Wallet does not exist.' } };
      if (b.onchainwallet !== undefined && b.onchainwallet !== onchainWallet) return { status: 404, body: { detail: 'Onchain wallet does not exist.' } };
      const lightning = b.lnbitswallet !== undefined;
      const hash = sha256(randomBytes(32));
      const id = randomBytes(11).toString('base64url');
      const charge: SatspayCharge = {
        id,
        lnbitswallet: lightning ? wallet : null,
        onchainwallet: b.onchainwallet !== undefined ? onchainWallet : null,
        description: b.description as string,
        onchainaddress: b.onchainwallet !== undefined ? devOnchainAddress() : null,
        payment_request: !lightning
          ? ''
          : encodeBolt11(
              {
                amount_sats: fake.faults.billsSats ?? (b.amount as number),
                timestamp: Math.floor(Date.now() / 1000),
                payment_hash: hash,
                payment_secret: randomBytes(32),
                description: b.description as string,
                expiry_seconds: (b.time as number) * 60,
              },
              nodeKey,
            ),
        payment_hash: lightning ? Buffer.from(hash).toString('hex') : '',
        webhook: (b.webhook as string | undefined) ?? null,
        completelink: (b.completelink as string | undefined) ?? null,
        completelinktext: 'Back to Merchant',
        time: b.time as number,
        amount: fake.faults.billsSats ?? (b.amount as number),
        balance: 0,
        pending: 0,
        timestamp: Math.floor(Date.now() / 1000),
        extra: JSON.stringify({ mempool_endpoint: 'https://mempool.space', network: 'Mainnet' }),
      };
      charges.set(id, charge);
      return { status: 200, body: json(charge) };
    }
    const m = req.method === 'GET' && /^\/satspay\/api\/v1\/charge\/([^/]+)$/.exec(req.path);
    if (m) {
      const c = charges.get(decodeURIComponent(m[1]!));
      if (!c) return { status: 404, body: { detail: 'Charge does not exist.' } };
      return { status: 200, body: json(c) };
    }
    return undefined;
  });
  return {
    ...fake,
    apiKey,
    wallet,
    onchainWallet,
    charges,
    pay(id, sats) {
      const c = charges.get(id);
      if (!c) throw new Error(`no charge ${id}`);
      c.balance += sats ?? c.amount - c.balance;
    },
    chargeJson(id) {
      const c = charges.get(id);
      if (!c) throw new Error(`no charge ${id}`);
      return json(c);
    },
  };
}
