import { z } from './zod.js';

export const Id = z.string().min(1).max(64);
export const UnixSeconds = z.number().int().nonnegative();

export const ID_PREFIXES = {
  plan: 'plan_',
  subscription: 'sub_',
  subscriber: 'cus_',
  payment: 'pay_',
  nwc: 'nwc_',
  wallet: 'wal_',
  event: 'evt_',
  watchonly_wallet: 'wow_',
} as const;

export const PaginationQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});
export type PaginationQuery = z.infer<typeof PaginationQuery>;

export function Paginated<T extends z.ZodType>(item: T) {
  return z.object({
    items: z.array(item),
    total: z.number().int().nonnegative(),
    limit: z.number().int(),
    offset: z.number().int(),
  });
}
export type Paginated<T> = { items: T[]; total: number; limit: number; offset: number };

export const ValidationIssue = z.object({
  loc: z.array(z.union([z.string(), z.number()])),
  msg: z.string(),
  type: z.string(),
});
export type ValidationIssue = z.infer<typeof ValidationIssue>;

/** Every error answer of the API: `{"detail": ...}`; a list of issues for 422, a sentence otherwise. */
export const ErrorBody = z
  .object({ detail: z.union([z.string(), z.array(ValidationIssue)]) })
  .openapi('Error');
export type ErrorBody = z.infer<typeof ErrorBody>;

export const SuccessMessageResponse = z
  .object({ success: z.boolean(), message: z.string() })
  .openapi('SuccessMessageResponse');
export type SuccessMessageResponse = z.infer<typeof SuccessMessageResponse>;

export const IdParams = z.strictObject({ id: Id });
export const EmptyObject = z.strictObject({});

/** zod issues as the API's 422 detail, `loc` starting with where the value came from (body, query, path). */
export function toValidationDetail(issues: readonly z.core.$ZodIssue[], where: string): ValidationIssue[] {
  return issues.map((i) => ({
    loc: [where, ...i.path.map((p) => (typeof p === 'symbol' ? String(p) : p))],
    msg: i.message,
    type: i.code,
  }));
}
