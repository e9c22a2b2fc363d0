export { conflict, DomainError, invalid, invalidFields, notFound, notFoundAs } from '@sb/runtime';
export type { FieldIssue } from '@sb/contracts';
