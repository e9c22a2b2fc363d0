import { Counter, type Registry } from 'prom-client';

/** What an operator watches of deliveries: attempts by channel and outcome (the log has each one). */
export interface NotifierMetrics {
  webhookAttempts: Counter<'outcome'>;
  notificationAttempts: Counter<'channel' | 'outcome'>;
}

/** `delivered`, `retried` (failed, tried again later) or `failed` (for good). */
export type AttemptOutcomeLabel = 'delivered' | 'retried' | 'failed';

export const outcomeLabel = (delivered: boolean, next: number | null): AttemptOutcomeLabel => (delivered ? 'delivered' : next === null ? 'failed' : 'retried');

export function notifierMetrics(registry: Registry): NotifierMetrics {
  return {
    webhookAttempts: new Counter({
      name: 'webhook_attempts_total',
      help: 'Webhook delivery attempts, by outcome (delivered, retried, failed for good)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    notificationAttempts: new Counter({
      name: 'notification_attempts_total',
      help: 'Notification attempts (e-mail, messenger, nostr), by channel and outcome (delivered, retried, failed for good)',
      labelNames: ['channel', 'outcome'],
      registers: [registry],
    }),
  };
}
