import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, waitReady } from '../scripts/stack.mjs';
import { client, until } from './support/http.js';
import { startNostrRelay, type NostrRelay } from './support/nostr-relay.js';
import { startNwcWallet, type NwcWallet } from './support/nwc-wallet.js';
import { publishRefused, startStack, type Stack } from './support/stack.js';

/**
 * POST /public/subscribe/nwc waits up to 75 s on the bus (its wallet pays at once). Found from outside:
 * with the answering service killed mid-request, the gateway answered 503 only after that whole wait;
 * and a request whose client had gone away left no line in the gateway's log.
 */
const ROUTE_WAIT_MS = 75_000;
let stack: Stack;
let relay: NostrRelay;
let wallet: NwcWallet;

beforeAll(async () => {
  relay = await startNostrRelay();
  stack = await startStack({ wallets: 1, env: { BUS_TIMEOUT_MS: '2000', NWC_INFO_TIMEOUT_MS: '3000', NWC_REPLY_TIMEOUT_MS: '20000' } });
  wallet = await startNwcWallet({ relayUrl: relay.url, api: stack.api });
});
afterAll(async () => {
  await wallet?.stop();
  await stack?.stop();
  await relay?.stop();
});

async function nwcPlan(name: string): Promise<string> {
  const admin = client(stack.api, stack.wallets[0]!.admin_key);
  return (await admin.post('/plans', { name, amount_sats: 1500, interval: 'monthly', allow_nwc: true })).body.id;
}

const subscribe = (plan_id: string, email: string, init?: RequestInit) =>
  fetch(`${stack.api}/public/subscribe/nwc`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ plan_id, email, nwc_connection_string: wallet.connectionString() }),
    ...init,
  });

describe('a checkout page whose plan billing cannot look up', () => {
  it('is served, for a plan that may or may not exist: the page asks again itself and says what it finds', async () => {
    const plan = await nwcPlan('Page while frozen');
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    const answers: [number, string][] = [];
    try {
      for (const id of [plan, 'plan_01JUNKJUNKJUNKJUNKJUNKJUNK']) {
        const res = await fetch(`${stack.gatewayUrl}/subscriptions_manager/checkout/${id}`, { headers: { Accept: 'text/html' } });
        const html = await res.text();
        answers.push([res.status, /src="\/subscriptions_manager\/assets\/checkout-[^"]+\.js"/.test(html) ? 'page' : html.slice(0, 200)]);
      }
    } finally {
      billing.kill('SIGCONT');
    }
    expect(answers).toEqual([
      [200, 'page'],
      [200, 'page'],
    ]);
    // Billing back: the unknown plan is a 404 again.
    const back = await until(
      () => fetch(`${stack.gatewayUrl}/subscriptions_manager/checkout/plan_01JUNKJUNKJUNKJUNKJUNKJUNK`, { headers: { Accept: 'text/html' } }),
      (r) => r.status === 404,
    );
    expect(back.status).toBe(404);
  });
});

describe('a request with a long bus wait', () => {
  it("whose plan check billing does not answer is 503 without contacting the wallet's relay (review)", async () => {
    const plan = await nwcPlan('Frozen');
    const asked = relay.asked.length;
    const billing = stack.services.billing.child;
    billing.kill('SIGSTOP');
    let res: Response;
    try {
      res = await subscribe(plan, 'frozen@example.com');
    } finally {
      billing.kill('SIGCONT');
    }
    expect(res.status).toBe(503);
    // Before: the check was skipped as if billing were an older version, the wallet was asked, and the
    // subscribe then waited for billing a second time.
    expect(relay.asked.slice(asked).filter((f) => f.authors?.includes(wallet.pubkey))).toEqual([]);
  });

  it('whose answerer works for longer than the default wait (a wallet taking 8 s) is answered', async () => {
    const plan = await nwcPlan('Alive');
    wallet.setBehaviour({ pay: true, delayMs: 8000 });
    const res = await subscribe(plan, 'alive@example.com');
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(201);
    expect(body.status).toBe('active');
  });

  it('whose client goes away before the answer leaves a line in the gateway log', async () => {
    const plan = await nwcPlan('Gone');
    wallet.setBehaviour({ pay: true, delayMs: 3000 });
    const asked = wallet.requests.length;
    const aborted = new AbortController();
    const pending = subscribe(plan, 'gone@example.com', {
      signal: aborted.signal,
      headers: { 'content-type': 'application/json', 'x-request-id': 'client-gone-1' },
    });
    await until(
      async () => wallet.requests.length,
      (n) => n > asked,
    );
    aborted.abort();
    await expect(pending).rejects.toThrow();
    const line = await until(
      async () => stack.services.gateway.lines.find((l) => l.includes('client-gone-1')),
      (l) => l !== undefined,
    );
    expect(line, 'no request line for the request whose client went away').toBeDefined();
    const logged = JSON.parse(line!);
    expect(logged).toMatchObject({ msg: 'request', route: 'public.subscribe.nwc', status: 499, client_gone: true });
  });

  it('whose answering service is killed mid-request is answered 503 well before its wait', async () => {
    const plan = await nwcPlan('Killed');
    wallet.setBehaviour({ pay: true, noAnswer: true });
    const asked = wallet.requests.length;
    const started = Date.now();
    const pending = subscribe(plan, 'killed@example.com');
    // nwc is waiting for the wallet: the request is in its hands.
    await until(
      async () => wallet.requests.length,
      (n) => n > asked,
    );
    stack.services.nwc.child.kill('SIGKILL');
    const res = await pending;
    const body = await res.json();
    expect(res.status, JSON.stringify(body)).toBe(503);
    expect(body.detail).toBe('Service did not answer in time, please retry');
    expect(Date.now() - started).toBeLessThan(ROUTE_WAIT_MS / 2);
  });
});

describe('a service starting while JetStream does not answer it', () => {
  const INFO = '$JS.API.STREAM.INFO.KV_dev_clock';
  /** Whether the server refuses billing's look-up of the test clock's bucket; undefined while it is still reloading. */
  const infoRefused = () => publishRefused(stack, 'billing', INFO);

  it('waits for it, not ready meanwhile, instead of exiting, and is ready once it answers (found in CI: billing exited on a timeout)', async () => {
    await stack.stopBilling();
    // Billing's requests to look up the bucket go unanswered, as on a server too busy to answer in time.
    stack.reloadNats((conf) => {
      const at = conf.indexOf('user: billing');
      const denied = conf.slice(0, at) + conf.slice(at).replace(`${JSON.stringify(INFO)}, `, '');
      expect(denied).not.toBe(conf);
      return denied;
    });
    let billing: Awaited<ReturnType<typeof startService>> | undefined;
    try {
      expect(await until(infoRefused, (refused) => refused === true)).toBe(true);
      billing = await startService('billing', stack.env, { waitReady: false });
      const said = await until(
        async () => billing!.lines.find((l) => l.includes('test clock not set up')),
        (l) => l !== undefined,
        30_000,
      );
      expect(JSON.parse(said!)).toMatchObject({ level: 40, msg: 'test clock not set up; trying again with a backoff' });
      expect(billing.child.exitCode).toBeNull();
      expect((await fetch(`${billing.url}/readyz`)).status).toBe(503);
    } finally {
      stack.reloadNats();
    }
    try {
      expect(await until(infoRefused, (refused) => refused === false)).toBe(false);
      await waitReady(`${billing!.url}/readyz`, 60_000, billing!.child);
      expect(billing!.lines.some((l) => l.includes('billing ready'))).toBe(true);
    } finally {
      await billing?.stop();
      await stack.restartBilling();
    }
  });
});
