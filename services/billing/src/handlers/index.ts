import type { Handler } from '@sb/runtime';
import type { Deps } from '../deps.js';
import { archivePlanHandler } from './plans.archive.js';
import { createPlan } from './plans.create.js';
import { getPlan } from './plans.get.js';
import { listPlans } from './plans.list.js';
import { listArchivedPlans } from './plans.list_archived.js';
import { updatePlanHandler } from './plans.update.js';
import { getPublicPlan } from './public.plan_get.js';

export const allHandlers = (d: Deps): Handler[] => [
  listPlans(d),
  createPlan(d),
  getPlan(d),
  updatePlanHandler(d),
  archivePlanHandler(d),
  listArchivedPlans(d),
  getPublicPlan(d),
];
