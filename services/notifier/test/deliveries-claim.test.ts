import { createDb, type Db, migrate } from '@sb/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../../../test/support/stack.js';
import { DeliveriesRepo } from '../src/store/deliveries.repo.js';
import { EndpointsRepo } from '../src/store/endpoints.repo.js';
import { type NotificationRecord, NotificationsRepo, routeOf } from '../src/store/notifications.repo.js';
import { migrations } from '../src/store/migrations.js';

/**
 * The delivery and notification claims in the database (found from outside: receivers that never answer took every place):
 * at most a share of one endpoint's deliveries, counting what is under way; due order across endpoints;
 * two replicas claiming at once never take the same delivery.
 */
let db: Db;
let drop: () => Promise<void>;
const deliveries = new DeliveriesRepo('notifier');
const endpoints = new EndpointsRepo('notifier');
const notifications = new NotificationsRepo('notifier');
const NOW = 1_800_000_000;

beforeAll(async () => {
  const created = await createDatabase('sb_claim');
  drop = created.drop;
  db = createDb(created.url, { max: 4 });
  await migrate(db, 'notifier', migrations);
  for (const id of ['whe_a', 'whe_b', 'whe_gone']) {
    await endpoints.insert(db, {
      id,
      wallet_id: 'wal_1',
      url: `https://example.com/${id}`,
      events: null,
      plan_id: null,
      description: null,
      secret_sealed: 's',
      created_at: NOW,
    });
  }
  await db.query(`UPDATE notifier.endpoints SET deleted_at = $1 WHERE id = 'whe_gone'`, [NOW]);
  // 30 due for a, 30 for b (b's a second later each), 5 for the deleted one, 5 of a not due yet.
  for (let i = 0; i < 30; i++) {
    for (const [ep, at] of [
      ['whe_a', NOW - 100 + i],
      ['whe_b', NOW - 99 + i],
    ] as const) {
      await deliveries.record(db, {
        id: `d_${ep}_${i}`,
        endpoint_id: ep,
        wallet_id: 'wal_1',
        event_id: `evt_${i}`,
        event: 'subscription.created',
        body: '{}',
        now: at,
      });
    }
  }
  for (let i = 0; i < 5; i++) {
    await deliveries.record(db, {
      id: `d_gone_${i}`,
      endpoint_id: 'whe_gone',
      wallet_id: 'wal_1',
      event_id: `evt_${i}`,
      event: 'subscription.created',
      body: '{}',
      now: NOW - 200,
    });
    await deliveries.record(db, {
      id: `d_later_${i}`,
      endpoint_id: 'whe_a',
      wallet_id: 'wal_1',
      event_id: `evt_later_${i}`,
      event: 'subscription.created',
      body: '{}',
      now: NOW + 60,
    });
  }
});
afterAll(async () => {
  await db?.close();
  await drop?.();
});

/** How many of the rows each key has. */
function countBy<R>(rows: R[], key: (r: R) => string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of rows) counts[key(r)] = (counts[key(r)] ?? 0) + 1;
  return counts;
}
/** A claim at NOW with a 60 s lease, nothing running. */
const claimOf = <R>(repo: { claimDue(q: Db, c: Claim): Promise<R[]> }, limit: number, share: Pick<Claim, 'perGroup' | 'busy'>) =>
  repo.claimDue(db, { now: NOW, limit, leaseS: 60, running: [], ...share });
const perEndpoint = (rows: { endpoint_id: string }[]) => countBy(rows, (r) => r.endpoint_id);

describe('claimDue', () => {
  it('takes at most the share of an endpoint less what it has under way, earliest first, never of a deleted endpoint or not yet due', async () => {
    const claimed = await claimOf(deliveries, 100, { perGroup: 10, busy: new Map([['whe_b', 7]]) });
    expect(perEndpoint(claimed)).toEqual({ whe_a: 10, whe_b: 3 });
    expect(
      claimed
        .filter((r) => r.endpoint_id === 'whe_a')
        .map((r) => r.id)
        .sort(),
    ).toEqual(Array.from({ length: 10 }, (_, i) => `d_whe_a_${i}`).sort());
    // Leased: not claimed again until the lease ends.
    const again = await claimOf(deliveries, 100, {
      perGroup: 10,
      busy: new Map([
        ['whe_a', 10],
        ['whe_b', 10],
      ]),
    });
    expect(again).toEqual([]);
    const next = await claimOf(deliveries, 4, { perGroup: 10, busy: new Map() });
    // Due order across endpoints: b's next (NOW - 96 on) come before a's (NOW - 90 on).
    expect(next.map((r) => r.id).sort()).toEqual(['d_whe_b_3', 'd_whe_b_4', 'd_whe_b_5', 'd_whe_b_6']);
  });

  it('two replicas claiming at once never take the same delivery', async () => {
    const share = { perGroup: 50, busy: new Map<string, number>() };
    const [one, two] = await Promise.all([claimOf(deliveries, 20, share), claimOf(deliveries, 20, share)]);
    const ids = [...one, ...two].map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.every((id) => id.startsWith('d_whe_a_') || id.startsWith('d_whe_b_'))).toBe(true);
  });
});

describe('notifications claimDue', () => {
  /** `n` notices of a wallet's channel through `route` (null: recorded by older code), due from `at` on (one a second). */
  const notices = (wallet: string, channel: 'email' | 'messenger', route: string | null, n: number, at: number) =>
    notifications.recordMany(
      db,
      Array.from({ length: n }, (_, i) => ({
        id: `ntf_${wallet}_${channel}_${i}`,
        wallet_id: wallet,
        event_id: `evt_${wallet}_${channel}_${i}`,
        event: 'subscription.created',
        audience: 'owner' as const,
        channel,
        route,
        recipient: 'owner',
        subscription_id: null,
        plan_id: null,
        settings_plan_id: '',
        subject: 's',
        body_sealed: 'b',
        created_at: at + i,
      })),
    );
  const perRoute = (rows: NotificationRecord[]) => countBy(rows, routeOf);
  const release = () => db.query(`UPDATE notifier.notifications SET status = 'delivered' WHERE status = 'pending'`);

  it('takes at most a share of a route less what it has under way; one at its share is passed over for the later due of others (found from outside)', async () => {
    // The hung owner's 40 notices are all due before any of the others'.
    await notices('wal_hung', 'email', 'email:wal_hung', 40, NOW - 500);
    await notices('wal_hung', 'messenger', 'messenger', 3, NOW - 400);
    await notices('wal_ok', 'email', 'email', 5, NOW - 300);
    const first = await claimOf(notifications, 32, { perGroup: 16, busy: new Map() });
    expect(perRoute(first)).toEqual({ 'email:wal_hung': 16, messenger: 3, email: 5 });
    // At its share (and made slow: 16 - 2 more counted): passed over, none of it claimed.
    const second = await claimOf(notifications, 32, { perGroup: 16, busy: new Map([['email:wal_hung', 16 + 14]]) });
    expect(second).toEqual([]);
    // Two of its 16 ended: two more of it, earliest first.
    const third = await claimOf(notifications, 32, { perGroup: 16, busy: new Map([['email:wal_hung', 14]]) });
    expect(third.map((r) => r.id).sort()).toEqual(['ntf_wal_hung_email_16', 'ntf_wal_hung_email_17']);
    await release();
  });

  it('a large backlog of one route, under its share, does not keep a later due notice of another route out (found in review)', async () => {
    await notices('wal_big', 'email', 'email:wal_big', 500, NOW - 1000);
    await notices('wal_other', 'messenger', 'messenger', 1, NOW - 10);
    const got = await claimOf(notifications, 24, { perGroup: 16, busy: new Map([['email:wal_big', 8]]) });
    expect(perRoute(got)).toEqual({ 'email:wal_big': 8, messenger: 1 });
    await release();
  });

  it('notices recorded without a route (by older code) count by wallet and channel', async () => {
    await notices('wal_old', 'email', null, 10, NOW - 100);
    const got = await claimOf(notifications, 32, { perGroup: 4, busy: new Map([['wal_old:email', 1]]) });
    expect(perRoute(got)).toEqual({ 'wal_old:email': 3 });
    await release();
  });

  it('two replicas claiming at once never take the same notice', async () => {
    await notices('wal_many', 'email', 'email:wal_many', 30, NOW - 50);
    const share = { perGroup: 20, busy: new Map<string, number>() };
    const [one, two] = await Promise.all([claimOf(notifications, 15, share), claimOf(notifications, 15, share)]);
    const ids = [...one, ...two].map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBeGreaterThan(0);
  });
});
