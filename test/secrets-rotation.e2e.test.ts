import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SecretBox } from '@sb/runtime';
import { ROOT } from '../scripts/stack.mjs';
import { client, until } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

let stack: Stack;
let receiver: Server;
let receiverUrl: string;
const hooks: { body: string; headers: IncomingHttpHeaders }[] = [];

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      hooks.push({ body: raw, headers: req.headers });
      res.end('ok');
    });
  });
  receiverUrl = await new Promise<string>((r) => receiver.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`)));
  stack = await startStack({ wallets: 1, env: { WEBHOOK_ALLOW_PRIVATE: '1', NOTIFIER_POLL_INTERVAL_MS: '300' } });
});
afterAll(async () => {
  await stack?.stop();
  receiver?.close();
});

/** The reseal command as an operator runs it. */
async function resealCli(env: Record<string, string>): Promise<any> {
  const { stdout } = await promisify(execFile)(process.execPath, [join(ROOT, 'libs/runtime/dist/cli/reseal.js')], {
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
  });
  return JSON.parse(stdout);
}

describe('SECRETS_KEY rotation', () => {
  it('re-seals every stored secret with the new key; the services then work with the new key alone', async () => {
    const admin = client(stack.api, stack.wallets[0]!.admin_key);
    const endpoint = await admin.post('/webhook-endpoints', { url: receiverUrl, events: ['subscription.activated'] });
    expect(endpoint.status).toBe(201);
    const plan = (await admin.post('/plans', { name: 'Rotated', amount_sats: 1000, interval: 'monthly' })).body;
    const checkout = (await client(stack.api).post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'rotate@example.com' })).body;
    expect(checkout.manage_url).toMatch(/^http/);

    const oldKey = stack.env.SECRETS_KEY!;
    const newKey = randomBytes(32).toString('hex');
    const oldId = new SecretBox(oldKey).keyId;
    const newId = new SecretBox(newKey).keyId;
    const sealed = async () =>
      [
        ...(await stack.db.query(`SELECT token_sealed AS v FROM billing.subscribers`)).rows,
        ...(await stack.db.query(`SELECT secret_sealed AS v FROM notifier.endpoints`)).rows,
      ].map((r) => r.v as string);
    expect((await sealed()).every((v) => v.startsWith(`${oldId}.`))).toBe(true);

    // Rotate: the new key first, the old one still known, then re-seal what is stored.
    const first = await resealCli({ DATABASE_URL: stack.databaseUrl, SECRETS_KEY: newKey, SECRETS_KEY_PREVIOUS: oldKey });
    expect(first.key_id).toBe(newId);
    expect(first.resealed['billing.subscribers']).toBeGreaterThanOrEqual(1);
    expect(first.resealed['notifier.endpoints']).toBeGreaterThanOrEqual(1);
    expect((await sealed()).every((v) => v.startsWith(`${newId}.`))).toBe(true);
    const again = await resealCli({ DATABASE_URL: stack.databaseUrl, SECRETS_KEY: newKey, SECRETS_KEY_PREVIOUS: oldKey });
    expect(Object.values(again.resealed)).toEqual([0, 0, 0]);

    // The old key is gone: billing shows the same portal link, the notifier signs with the same secret.
    stack.env.SECRETS_KEY = newKey;
    await stack.restartBilling();
    await stack.restartNotifier();
    const link = await admin.get(`/subscriptions/${checkout.subscription_id}/manage-link`);
    expect(link.status).toBe(200);
    expect(link.body.manage_url).toBe(checkout.manage_url);
    expect((await client(stack.api).post(`/dev/payments/${checkout.payment_id}/pay`)).status).toBe(200);
    const hook = await until(
      async () => hooks.find((h) => JSON.parse(h.body).data.subscription_id === checkout.subscription_id),
      (h) => !!h,
      30_000,
    );
    expect(hook).toBeDefined();
    expect(() => new Webhook(endpoint.body.secret).verify(hook!.body, hook!.headers as Record<string, string>)).not.toThrow();
  });
});
