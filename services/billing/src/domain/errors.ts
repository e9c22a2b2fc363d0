export { conflict, invalid, invalidFields, notFoundAs } from '@sb/runtime';
export type { FieldIssue } from '@sb/contracts';
