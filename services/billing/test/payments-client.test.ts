import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CreatedPayment, messages } from '@sb/contracts';
import { BusClient, type BusServer, createBusServer, DomainError, messageHandler, registerHandlers } from '@sb/runtime';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startNats } from '../../../scripts/stack.mjs';
import { requestPayments } from '../src/payments-client.js';

/**
 * Billing asks for a sweep's renewal payments in one message. During a rolling update the payments
 * service may still run a version that answers only the single message: renewals must go on.
 */
let dir: string;
let nats: Awaited<ReturnType<typeof startNats>>;
let bus: BusClient;
let server: BusServer | undefined;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sb-payclient-'));
  nats = await startNats(dir);
  bus = new BusClient(nats.url, 10_000, 'payclient-test');
  await bus.connect();
});
afterEach(async () => {
  await server?.close();
  server = undefined;
});
afterAll(async () => {
  await bus?.close();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A payments service that knows only `create_payment` (the version before batches); `refuse` fails one. */
async function singleOnlyPayments(refuse: string) {
  const seen: string[] = [];
  server = createBusServer(nats.url, 'payments');
  registerHandlers(
    server,
    [
      messageHandler(messages.createPayment, async (r): Promise<CreatedPayment> => {
        seen.push(r.idempotency_key);
        if (r.subscription_id === refuse) throw new DomainError('invalid', 'no such watch-only wallet');
        const id = `pay_${r.subscription_id}`;
        return {
          payment: { id, subscription_id: r.subscription_id, amount_sats: r.amount_sats, status: 'pending', payment_method: r.payment_method, created_at: 1 },
          checkout: { payment_id: id, payment_method: r.payment_method, subscription_id: r.subscription_id, expires_at: r.expires_at },
        };
      }),
    ],
    pino({ level: 'silent' }),
  );
  await new Promise<void>((resolve, reject) => server!.listen((err?: unknown) => (err ? reject(err) : resolve())));
  return seen;
}

const ask = (i: number) => ({
  plan: undefined,
  sub: { id: `sub_${i}`, wallet_id: 'wal_1', plan_id: 'plan_1', amount_sats: 1000 + i, payment_method: 'lightning' as const },
  o: { purpose: 'renewal' as const, description: 'Renewal', expires_at: 2_000_000_000, idempotency_key: `renewal:sub_${i}` },
});

describe('requestPayments', () => {
  it('asks one by one, in order, when nobody answers the batch message; an error stays with its own request', async () => {
    const seen = await singleOnlyPayments('sub_7');
    const asks = Array.from({ length: 20 }, (_, i) => ask(i));
    const results = await requestPayments({ bus }, asks);
    expect(results).toHaveLength(20);
    results.forEach((r, i) => {
      if (i === 7) {
        expect(r).toBeInstanceOf(DomainError);
        expect((r as DomainError).message).toBe('no such watch-only wallet');
      } else {
        expect((r as CreatedPayment).payment).toMatchObject({ id: `pay_sub_${i}`, amount_sats: 1000 + i });
      }
    });
    expect(seen.sort()).toEqual(asks.map((a) => a.o.idempotency_key).sort());
  });

  it('with no payments service at all, the outage reaches the caller (the sweep tries later)', async () => {
    await expect(requestPayments({ bus }, [ask(1)])).rejects.toThrow(/no responders/);
  });
});
