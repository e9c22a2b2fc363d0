import { z } from './zod.js';
import { Id, IdParams, Paginated, PaginationQuery, shownText, SuccessMessageResponse, UnixSeconds } from './common.js';
import { EventName } from './events.js';
import { defineRoutes } from './http.js';
import {
  Notification,
  NotificationListQuery,
  NotificationSettings,
  NotificationSettingsUpdate,
  NotificationTestRequest,
  NotificationTestResult,
  PlanNotificationSettings,
  PlanNotificationSettingsUpdate,
} from './notifications.js';

/** Body of `POST /webhook-endpoints`. */
export const WebhookEndpointCreate = z
  .strictObject({
    url: z
      .url({ protocol: /^https?$/, message: 'must be an http:// or https:// URL' })
      .max(2000, { error: 'must be at most 2000 characters' })
      // Credentials in the URL would be shown to every reader of the endpoint (the invoice key too).
      .refine((u) => !URL.canParse(u) || (!new URL(u).username && !new URL(u).password), {
        message: 'must not carry credentials (user:password@): deliveries are signed, so verify the webhook-signature header instead',
      }),
    // Bounded so that a long list is refused as a whole before its items are read: 30,000 wrong names
    // took zod a fifth of a second, each.
    events: z.array(EventName).min(1).max(50).optional().openapi({ description: 'Only these events; omitted: every event' }),
    plan_id: Id.optional().openapi({ description: "Only this plan's events" }),
    description: shownText(z.string().max(500)).optional(),
  })
  .openapi('WebhookEndpointCreate');
export type WebhookEndpointCreate = z.infer<typeof WebhookEndpointCreate>;

/** The signing secret is never part of it: it is shown once, in the answer to the create call. */
export const WebhookEndpoint = z
  .object({
    id: Id,
    url: z.string(),
    events: z.array(EventName).nullable().openapi({ description: 'null: every event, including ones added later' }),
    plan_id: Id.nullable(),
    description: z.string().nullable(),
    created_at: UnixSeconds,
  })
  .openapi('WebhookEndpoint');
export type WebhookEndpoint = z.infer<typeof WebhookEndpoint>;

/** A retry with the same Idempotency-Key answers the endpoint it made without the secret (shown once). */
export const WebhookEndpointCreated = WebhookEndpoint.extend({
  secret: z.string().optional().openapi({
    description:
      'Standard Webhooks signing secret (`whsec_<base64>`). Shown only in this answer: store it now. Absent when the answer repeats an earlier one (the same `Idempotency-Key`): that request made the endpoint and showed its secret.',
  }),
}).openapi('WebhookEndpointCreated');

export const WebhookDeliveryStatus = z.enum(['pending', 'delivered', 'failed']).openapi('WebhookDeliveryStatus');

export const WebhookDelivery = z
  .object({
    id: Id,
    endpoint_id: Id,
    event_id: Id.openapi({ description: 'Also the `webhook-id` header of every attempt' }),
    event: EventName,
    status: WebhookDeliveryStatus,
    attempt_count: z.number().int().nonnegative(),
    last_status_code: z.number().int().nullable(),
    last_error: z.string().nullable(),
    next_attempt_at: UnixSeconds.nullable(),
    delivered_at: UnixSeconds.nullable(),
    replay_of: Id.nullable().openapi({ description: 'The delivery this one replays' }),
    created_at: UnixSeconds,
    attempts: z
      .array(
        z.object({
          attempted_at: UnixSeconds,
          status_code: z.number().int().nullable().openapi({ description: "The receiver's HTTP status; null when none came" }),
          error: z.string().nullable(),
          duration_ms: z.number().int().nonnegative(),
        }),
      )
      .openapi({ description: 'Every attempt, oldest first' }),
  })
  .openapi('WebhookDelivery');
export type WebhookDelivery = z.infer<typeof WebhookDelivery>;

export const DeliveryParams = z.strictObject({ id: Id, delivery_id: Id });

/** The owner's outgoing webhooks, signed per Standard Webhooks, retried for 3 days, replayable. */
export const notifierRoutes = defineRoutes([
  {
    id: 'webhook_endpoints.create',
    method: 'post',
    path: '/webhook-endpoints',
    auth: 'admin',
    summary: 'Register a webhook endpoint; the answer carries its signing secret, shown only once',
    body: WebhookEndpointCreate,
    response: WebhookEndpointCreated,
    status: 201,
    subject: 'notifier.webhook_endpoints.create',
    shownOnce: ['secret'],
  },
  {
    id: 'webhook_endpoints.list',
    method: 'get',
    path: '/webhook-endpoints',
    auth: 'invoice',
    summary: "List the wallet's webhook endpoints",
    query: PaginationQuery,
    response: Paginated(WebhookEndpoint),
    subject: 'notifier.webhook_endpoints.list',
  },
  {
    id: 'webhook_endpoints.get',
    method: 'get',
    path: '/webhook-endpoints/{id}',
    auth: 'invoice',
    summary: 'Read a webhook endpoint (never its secret)',
    params: IdParams,
    response: WebhookEndpoint,
    subject: 'notifier.webhook_endpoints.get',
  },
  {
    id: 'webhook_endpoints.delete',
    method: 'delete',
    path: '/webhook-endpoints/{id}',
    auth: 'admin',
    summary: 'Delete a webhook endpoint; its pending deliveries are abandoned',
    params: IdParams,
    response: SuccessMessageResponse,
    subject: 'notifier.webhook_endpoints.delete',
  },
  {
    id: 'webhook_deliveries.list',
    method: 'get',
    path: '/webhook-endpoints/{id}/deliveries',
    auth: 'invoice',
    summary: "List an endpoint's deliveries, newest first",
    description: "Also of a deleted endpoint of the wallet: its pending deliveries were stopped with `last_error` 'endpoint deleted'.",
    params: IdParams,
    query: PaginationQuery,
    response: Paginated(WebhookDelivery),
    subject: 'notifier.webhook_deliveries.list',
  },
  {
    id: 'webhook_deliveries.replay',
    method: 'post',
    path: '/webhook-endpoints/{id}/deliveries/{delivery_id}/replay',
    auth: 'admin',
    summary: 'Send the event of a delivery again, as a new delivery with the same webhook-id',
    params: DeliveryParams,
    response: WebhookDelivery,
    status: 201,
    subject: 'notifier.webhook_deliveries.replay',
  },
  {
    id: 'notification_settings.get',
    method: 'get',
    path: '/notification-settings',
    auth: 'invoice',
    summary: "The wallet's notification channels and events (secrets shown as `configured`)",
    response: NotificationSettings,
    subject: 'notifier.notification_settings.get',
  },
  {
    id: 'notification_settings.put',
    method: 'put',
    path: '/notification-settings',
    auth: 'admin',
    summary: "Replace the wallet's notification channels and events; a generated Nostr key is answered once",
    body: NotificationSettingsUpdate,
    response: NotificationSettings,
    subject: 'notifier.notification_settings.put',
    shownOnce: ['generated_private_key'],
  },
  {
    id: 'notification_settings.test',
    method: 'post',
    path: '/notification-settings/test',
    auth: 'admin',
    summary: 'Send a test message through one channel now and answer the outcome',
    body: NotificationTestRequest,
    response: NotificationTestResult,
    subject: 'notifier.notification_settings.test',
    // An SMTP conversation or relay publishing can take this long; the sender gives up within it.
    busTimeoutMs: 45_000,
  },
  {
    id: 'plan_notification_settings.get',
    method: 'get',
    path: '/plans/{id}/notification-settings',
    auth: 'invoice',
    summary: "A plan's notification settings: inherited from the wallet, or its own",
    params: IdParams,
    response: PlanNotificationSettings,
    subject: 'notifier.plan_notification_settings.get',
  },
  {
    id: 'plan_notification_settings.put',
    method: 'put',
    path: '/plans/{id}/notification-settings',
    auth: 'admin',
    summary: "Inherit the wallet's notification settings (`inherit: true`) or override them whole",
    params: IdParams,
    body: PlanNotificationSettingsUpdate,
    response: PlanNotificationSettings,
    subject: 'notifier.plan_notification_settings.put',
    shownOnce: ['generated_private_key'],
  },
  {
    id: 'notifications.list',
    method: 'get',
    path: '/notifications',
    auth: 'invoice',
    summary: 'Every notification message with its attempts, newest first',
    query: NotificationListQuery,
    response: Paginated(Notification),
    subject: 'notifier.notifications.list',
  },
  {
    id: 'notifications.retry',
    method: 'post',
    path: '/notifications/{id}/retry',
    auth: 'admin',
    summary: 'Send a failed notification again (it is retried with the usual backoff)',
    params: IdParams,
    response: Notification,
    subject: 'notifier.notifications.retry',
  },
] as const);
