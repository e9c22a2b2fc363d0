import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { notificationHandlers } from './notification_settings.js';
import { webhookEndpointHandlers } from './webhook_endpoints.js';

export const allHandlers = (d: Deps): Handler[] => [...webhookEndpointHandlers(d), ...notificationHandlers(d)];
