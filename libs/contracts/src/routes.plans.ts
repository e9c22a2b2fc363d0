import { IdParams, Paginated, PaginationQuery } from './common.js';
import { defineRoutes } from './http.js';
import { ArchivedPlan, Plan, PlanCreate, PlanUpdate, PublicPlan } from './plans.js';

export const planRoutes = defineRoutes([
  {
    id: 'plans.list', method: 'get', path: '/plans', auth: 'invoice',
    summary: "List the wallet's active plans", query: PaginationQuery,
    response: Paginated(Plan), subject: 'billing.plans.list',
  },
  {
    id: 'plans.create', method: 'post', path: '/plans', auth: 'admin',
    summary: 'Create a plan', body: PlanCreate, response: Plan, status: 201,
    subject: 'billing.plans.create',
  },
  {
    id: 'plans.get', method: 'get', path: '/plans/{id}', auth: 'invoice',
    summary: 'Read a plan (archived plans too)', params: IdParams, response: Plan,
    subject: 'billing.plans.get',
  },
  {
    id: 'plans.update', method: 'put', path: '/plans/{id}', auth: 'admin',
    summary: 'Change a plan; existing subscriptions keep their price and interval',
    params: IdParams, body: PlanUpdate, response: Plan, subject: 'billing.plans.update',
  },
  {
    id: 'plans.archive', method: 'delete', path: '/plans/{id}', auth: 'admin',
    summary: "Archive a plan (idempotent) and cancel its subscriptions at period end",
    params: IdParams, response: ArchivedPlan, subject: 'billing.plans.archive',
  },
  {
    id: 'plans.archived.list', method: 'get', path: '/archive/plans', auth: 'invoice',
    summary: 'List archived plans', query: PaginationQuery, response: Paginated(Plan),
    subject: 'billing.plans.list_archived',
  },
  {
    id: 'public.plan.get', method: 'get', path: '/public/plan/{id}', auth: 'none',
    summary: 'Public view of an active plan for checkout pages', params: IdParams,
    response: PublicPlan, subject: 'billing.public.plan_get',
  },
] as const);
