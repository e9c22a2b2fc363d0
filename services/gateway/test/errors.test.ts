import { ERROR_KINDS } from '@sb/contracts';
import { conflict, DomainError, invalid, invalidFields, notFound, rejected, unauthenticated, unavailable } from '@sb/runtime';
import { describe, expect, it } from 'vitest';
import { HTTP_STATUS, httpOf } from '../src/errors.js';

describe('domain errors at the edge', () => {
  it('gives every kind a status', () => {
    expect(Object.keys(HTTP_STATUS).sort()).toEqual([...ERROR_KINDS].sort());
  });

  it.each([
    [notFound('Plan'), 404, 'Plan not found'],
    [conflict('Subscription is already cancelled'), 409, 'Subscription is already cancelled'],
    [unauthenticated('Invalid subscriber token'), 401, 'Invalid subscriber token'],
    [rejected('Invalid callback'), 400, 'Invalid callback'],
    [unavailable('The payment provider is not available right now'), 503, 'The payment provider is not available right now'],
  ])('maps %o to its status and a string detail', (err, status, detail) => {
    expect(httpOf((err as DomainError).toReply())).toEqual({ status, detail });
  });

  it('turns field issues into the API’s 422 list, the body first unless they say where', () => {
    expect(httpOf(invalid(['payment_method'], 'This plan does not accept onchain payments', 'method_not_allowed').toReply())).toEqual({
      status: 422,
      detail: [{ loc: ['body', 'payment_method'], msg: 'This plan does not accept onchain payments', type: 'method_not_allowed' }],
    });
    const many = invalidFields([
      { field: [], msg: 'At least one payment method must be allowed', type: 'value_error' },
      { field: ['channels', 'nostr', 'relays', 0], msg: 'relay is not allowed', type: 'value_error' },
      { field: ['limit'], msg: 'too big', type: 'too_big', in: 'query' },
    ]);
    expect(httpOf(many.toReply()).detail).toEqual([
      { loc: ['body'], msg: 'At least one payment method must be allowed', type: 'value_error' },
      { loc: ['body', 'channels', 'nostr', 'relays', 0], msg: 'relay is not allowed', type: 'value_error' },
      { loc: ['query', 'limit'], msg: 'too big', type: 'too_big' },
    ]);
  });

  it('an invalid error without fields keeps its sentence', () => {
    expect(httpOf(new DomainError('invalid', 'The message breaks its contract').toReply())).toEqual({ status: 422, detail: 'The message breaks its contract' });
  });
});
