import { IdParams, Paginated } from './common.js';
import { defineRoutes } from './http.js';
import { Payment, PaymentListQuery } from './payments.js';

export const paymentRoutes = defineRoutes([
  {
    id: 'payments.list',
    method: 'get',
    path: '/payments',
    auth: 'invoice',
    summary: "List payments across the wallet's subscriptions",
    query: PaymentListQuery,
    response: Paginated(Payment),
    subject: 'payments.payments.list',
  },
  {
    id: 'payments.get',
    method: 'get',
    path: '/payments/{id}',
    auth: 'invoice',
    summary: 'Read a payment',
    params: IdParams,
    response: Payment,
    subject: 'payments.payments.get',
  },
] as const);
