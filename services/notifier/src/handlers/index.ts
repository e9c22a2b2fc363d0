import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { webhookEndpointHandlers } from './webhook_endpoints.js';

export const allHandlers = (d: Deps): Handler[] => [...webhookEndpointHandlers(d)];
