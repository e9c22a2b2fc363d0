export { conflict, DomainError, notFound } from '@sb/runtime';
export type ValidationIssueLike = { loc: (string | number)[]; msg: string; type: string };
