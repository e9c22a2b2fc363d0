import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { EVENTS_STREAM, type BusReply, type EventEnvelope } from '@sb/contracts';
import { BusClient, createDb, type Db } from '@sb/runtime';
import { startNats, startService } from '../../../../scripts/stack.mjs';
import { createDatabase } from '../../../../test/support/stack.js';

/** The real payments process with a private nats-server and database, plus what a test needs to talk to it. */
export interface PaymentsService {
  bus: BusClient;
  db: Db;
  databaseUrl: string;
  natsUrl: string;
  lines: string[];
  /** A route subject's request as the gateway sends it. */
  route(subject: string, req: { params?: object; query?: object; body?: unknown; wallet_id?: string }): Promise<BusReply>;
  /** Waits until the outbox relay has published every committed event. */
  outboxDrained(): Promise<void>;
  /** Every event on the JetStream stream, oldest first, with the subject it was published on. */
  events(): Promise<{ subject: string; event: EventEnvelope }[]>;
  stop(): Promise<void>;
}

export async function startPaymentsService(env: Record<string, string>): Promise<PaymentsService> {
  const database = await createDatabase('sb_pay');
  const natsDir = mkdtempSync(join(tmpdir(), 'sb-nats-'));
  const nats = await startNats(natsDir);
  const svc = await startService('payments', { DATABASE_URL: database.url, NATS_URL: nats.url, LOG_LEVEL: 'info', ...env }).catch(async (err) => {
    await nats.stop();
    rmSync(natsDir, { recursive: true, force: true });
    await database.drop().catch(() => undefined);
    throw err;
  });
  const bus = new BusClient(nats.url, 30_000, 'payments-test');
  await bus.connect();
  const db = createDb(database.url, { max: 4 });
  return {
    bus,
    db,
    databaseUrl: database.url,
    natsUrl: nats.url,
    lines: svc.lines,
    route: (subject, r) =>
      bus.request(subject, {
        caller: r.wallet_id ? { wallet_id: r.wallet_id, role: 'invoice' } : {},
        params: r.params ?? {},
        query: r.query ?? {},
        body: r.body,
      }),
    async outboxDrained() {
      const until = Date.now() + 20_000;
      while (Date.now() < until) {
        const { rows } = await db.query('SELECT count(*)::int AS n FROM payments.outbox WHERE published_at IS NULL');
        if (rows[0].n === 0) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error('outbox not drained in 20 s');
    },
    async events() {
      const nc = await connect({ servers: nats.url });
      try {
        const jsm = await jetstreamManager(nc);
        const info = await jsm.streams.info(EVENTS_STREAM);
        const out: { subject: string; event: EventEnvelope }[] = [];
        for (let seq = info.state.first_seq; info.state.messages > 0 && seq <= info.state.last_seq; seq++) {
          const m = await jsm.streams.getMessage(EVENTS_STREAM, { seq }).catch(() => null);
          if (m) out.push({ subject: m.subject, event: m.json<EventEnvelope>() });
        }
        return out;
      } finally {
        await nc.close();
      }
    },
    async stop() {
      await bus.close().catch(() => undefined);
      await svc.stop();
      await db.close().catch(() => undefined);
      await nats.stop();
      rmSync(natsDir, { recursive: true, force: true });
      await database.drop().catch(() => undefined);
    },
  };
}

/** A callback as the gateway forwards it: raw body bytes in base64, lower-cased headers, the method. */
export function callback(raw: string, method: 'GET' | 'POST' = 'POST') {
  return { raw: Buffer.from(raw).toString('base64'), headers: { 'content-type': 'application/json' }, method };
}
