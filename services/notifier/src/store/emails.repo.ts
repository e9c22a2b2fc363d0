import type { Queryable } from '@sb/runtime';
import type { Mail } from '../domain/email.js';

export interface EmailRecord extends Mail {
  event_id: string;
  attempt_count: number;
  created_at: number;
}

export class EmailsRepo {
  constructor(private readonly schema: string) {}

  /** Once per (event, recipient): a redelivered event finds the row and sends nothing more. */
  async record(q: Queryable, walletId: string, eventId: string, event: string, mail: Mail, now: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `INSERT INTO ${this.schema}.emails (event_id, recipient, wallet_id, event, subject, body, status, next_attempt_at, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7) ON CONFLICT DO NOTHING`,
      [eventId, mail.to, walletId, event, mail.subject, mail.text, now],
    );
    return rowCount === 1;
  }

  /** Same lease scheme as webhook deliveries (see DeliveriesRepo.claimDue). */
  async claimDue(q: Queryable, now: number, limit: number, leaseS: number): Promise<EmailRecord[]> {
    const { rows } = await q.query<EmailRecord & { recipient: string; body: string }>(
      `WITH due AS (
         SELECT event_id, recipient FROM ${this.schema}.emails WHERE status = 'pending' AND next_attempt_at <= $1
          ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
       UPDATE ${this.schema}.emails m SET next_attempt_at = $1 + $3 FROM due
        WHERE m.event_id = due.event_id AND m.recipient = due.recipient
       RETURNING m.event_id, m.recipient, m.subject, m.body, m.attempt_count, m.created_at`,
      [now, limit, leaseS],
    );
    return rows.map((r) => ({ event_id: r.event_id, to: r.recipient, subject: r.subject, text: r.body, attempt_count: r.attempt_count, created_at: r.created_at }));
  }

  async finish(q: Queryable, m: EmailRecord, now: number, error: string | null, next: number | null): Promise<void> {
    const status = error === null ? 'sent' : next === null ? 'failed' : 'pending';
    await q.query(
      `UPDATE ${this.schema}.emails SET status = $3, attempt_count = attempt_count + 1, last_error = $4, next_attempt_at = COALESCE($5, next_attempt_at),
              sent_at = CASE WHEN $3 = 'sent' THEN $6::bigint ELSE NULL END
        WHERE event_id = $1 AND recipient = $2 AND status = 'pending'`,
      [m.event_id, m.to, status, error, next, now],
    );
  }
}
