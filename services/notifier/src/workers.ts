import type { Transporter } from 'nodemailer';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { contextOf, inSpan, linkActiveSpanTo, unixSeconds } from '@sb/runtime';
import type { Deps } from './deps.js';
import { nextAttemptAt } from './domain/retry.js';
import { sendWebhook } from './webhook-sender.js';

const BATCH = 20;

const openSecret = async (d: Deps, sealed: string) => d.secrets.open(sealed);

/** One round of due webhook deliveries; true when the batch was full (more may be due). */
export async function deliverDue(d: Deps): Promise<boolean> {
  // A claim outlives the longest send, so no other replica takes the row meanwhile.
  const leaseS = Math.ceil(d.webhookTimeoutMs / 1000) + 60;
  const due = await d.db.tx((tx) => d.deliveries.claimDue(tx, unixSeconds(d.clock), BATCH, leaseS));
  await Promise.all(
    due.map(async (row) => {
      // The sweep links to each delivery; each attempt is a span in the trace of the event that caused it.
      linkActiveSpanTo(row.trace_context);
      const outcome = await inSpan(
        'webhook deliver',
        { parent: contextOf(row.trace_context), kind: SpanKind.CLIENT, attributes: { 'webhook.delivery_id': row.id, 'webhook.event_id': row.event_id, 'webhook.event': row.event, 'webhook.attempt': row.attempt_count + 1 } },
        async (span) => {
          const o = await openSecret(d, row.secret_sealed).then(
            (secret) => sendWebhook({ url: row.url, secret, eventId: row.event_id, body: row.body }, { policy: d.addresses, timeoutMs: d.webhookTimeoutMs }),
            // Only a changed SECRETS_KEY does this; it is logged as the attempt's error, never with the secret.
            () => ({ status_code: null, error: 'signing secret cannot be opened (was SECRETS_KEY changed?)', duration_ms: 0, delivered: false }),
          );
          if (o.status_code !== null) span.setAttribute('http.response.status_code', o.status_code);
          if (!o.delivered) span.setStatus({ code: SpanStatusCode.ERROR, message: o.error ?? `status ${o.status_code}` });
          return o;
        },
      );
      const now = unixSeconds(d.clock);
      const next = outcome.delivered ? null : nextAttemptAt(row.attempt_count + 1, row.first_attempt_at ?? now, now);
      await d.deliveries.finishAttempt(d.db, row, outcome, now, next);
      d.log.info(
        { delivery_id: row.id, event_id: row.event_id, attempt: row.attempt_count + 1, status_code: outcome.status_code, error: outcome.error, duration_ms: outcome.duration_ms, next_attempt_at: next },
        outcome.delivered ? 'webhook delivered' : next === null ? 'webhook failed for good' : 'webhook attempt failed',
      );
    }),
  );
  return due.length === BATCH;
}

/** An SMTP conversation gives up within this long (see the transport's timeouts in main.ts). */
export const SMTP_TIMEOUT_MS = 30_000;
const MAIL_BATCH = 5;

/** One round of due subscriber e-mails, same retry schedule as webhooks. */
export async function mailDue(d: Deps, transport: Transporter, from: string): Promise<boolean> {
  // Sent one after another: the lease covers the whole batch at its slowest, so another replica never
  // takes (and sends again) a mail this one is still sending.
  const leaseS = Math.ceil((MAIL_BATCH * 3 * SMTP_TIMEOUT_MS) / 1000) + 60;
  const due = await d.db.tx((tx) => d.emails.claimDue(tx, unixSeconds(d.clock), MAIL_BATCH, leaseS));
  for (const m of due) {
    let error: string | null = null;
    try {
      await transport.sendMail({ from, to: m.to, subject: m.subject, text: m.text });
    } catch (err) {
      error = (err as Error).message || String(err);
    }
    const now = unixSeconds(d.clock);
    const next = error === null ? null : nextAttemptAt(m.attempt_count + 1, m.created_at, now);
    await d.emails.finish(d.db, m, now, error, next);
    // The address is personal data: the log names the event only.
    d.log.info({ event_id: m.event_id, error }, error === null ? 'subscriber e-mail sent' : 'subscriber e-mail failed');
  }
  return due.length === MAIL_BATCH;
}
