import { describe, expect, it } from 'vitest';
import {
  duplicateKeyIssues,
  EventEnvelope,
  eventSchema,
  isStorableText,
  MAX_JSON_DEPTH,
  storableText,
  undecodableQueryIssues,
  unstorableIssues,
  WebhookEvent,
  webhookBody,
} from '../src/index.js';

describe('storableText', () => {
  it('replaces NUL and unpaired surrogates, keeps pairs, and cuts at whole characters', () => {
    expect(storableText('a\u0000b\ud800c\udc00d 😀', 100)).toBe('a\ufffdb\ufffdc\ufffdd 😀');
    expect(isStorableText(storableText('x\ud83d', 10))).toBe(true);
    expect(storableText('😀😀😀', 2)).toBe('😀😀');
    expect(storableText('abc', 3)).toBe('abc');
  });
});

describe('unstorableIssues', () => {
  it('names every string and key holding NUL or an unpaired surrogate, and lets real text through', () => {
    expect(isStorableText('plain é 😀 \u202e')).toBe(true);
    for (const bad of ['\u0000', 'a\u0000', '\ud800', '\udc00x', 'x\ud83d']) expect(isStorableText(bad), JSON.stringify(bad)).toBe(false);
    const issues = unstorableIssues({ name: 'ok', description: 'x\u0000', metadata: { ['k\ud800']: 'v', k2: ['a', '\udc00'] } }, 'body');
    expect(issues.map((i) => i.loc).sort()).toEqual(
      [
        ['body', 'description'],
        ['body', 'metadata', 'k2', 1],
        ['body', 'metadata', 'k\ufffd'],
      ].sort(),
    );
    expect(unstorableIssues({ a: [1, { b: 'c' }], n: null, t: true }, 'body')).toEqual([]);
  });

  it('refuses nesting deeper than the limit without overflowing itself', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(unstorableIssues(deep, 'body')).toEqual([{ loc: ['body'], msg: `Nested deeper than ${MAX_JSON_DEPTH} levels`, type: 'too_deep' }]);
    let ok: unknown = 1;
    for (let i = 0; i < MAX_JSON_DEPTH; i++) ok = { a: ok };
    expect(unstorableIssues(ok, 'body')).toEqual([]);
  });
});

describe('duplicateKeyIssues', () => {
  const dup = (text: string) => duplicateKeyIssues(text, 'body').map((i) => i.loc);
  it('names the first key given twice in one object, at any depth, compared decoded', () => {
    expect(dup('{"name":"a","name":"b"}')).toEqual([['body', 'name']]);
    expect(dup('{ "name" : "a" ,\n "name"\t: "b" }')).toEqual([['body', 'name']]);
    expect(dup('{"a":1,"\\u0061":2}')).toEqual([['body', 'a']]);
    expect(dup('{"metadata":{"k":"1","k":"2"}}')).toEqual([['body', 'metadata', 'k']]);
    expect(dup('{"events":[{"x":1},{"y":1,"y":2}]}')).toEqual([['body', 'events', 1, 'y']]);
    expect(dup('[[1],{"a":{"b":1},"a":2}]')).toEqual([['body', 1, 'a']]);
  });
  it('lets through the same key in different objects, and keys written inside string values', () => {
    expect(dup('{"a":{"a":1},"b":{"a":2},"c":[{"a":1},{"a":1}]}')).toEqual([]);
    expect(dup('{"name":"\\"name\\": 1","description":"name\\\\","x":"\\"description\\":"}')).toEqual([]);
    expect(dup('"a"')).toEqual([]);
    expect(dup('{}')).toEqual([]);
  });
  it('walks a deep text without overflowing itself', () => {
    expect(dup(`${'['.repeat(200_000)}1${']'.repeat(200_000)}`)).toEqual([]);
  });
});

describe('undecodableQueryIssues', () => {
  it('names query values that are not UTF-8 once percent-decoded', () => {
    expect(undecodableQueryIssues('search=a%ED%A0%80b&limit=5')).toEqual([{ loc: ['query', 'search'], msg: expect.any(String), type: 'string_unstorable' }]);
    expect(undecodableQueryIssues('search=%F0%9F%98%80&x=%20+y&flag')).toEqual([]);
    expect(undecodableQueryIssues('%FF=1')).toHaveLength(1);
  });
});

describe('event schemas', () => {
  it('require the WebhookEvent fields, subscription_id on every event as webhooks get it ("" for a plan archived with none)', () => {
    const base = { plan_id: 'plan_1', plan_name: 'P', status: 'active' };
    expect(eventSchema('subscription.paused').safeParse({ event: 'subscription.paused', timestamp: 1, data: base }).success).toBe(false);
    expect(
      eventSchema('subscription.paused').safeParse({ event: 'subscription.paused', timestamp: 1, data: { ...base, subscription_id: 'sub_1' } }).success,
    ).toBe(true);
    const archived = { event: 'plan.archived', timestamp: 1, data: { ...base, status: 'archived', cancelled_subscriptions: 0 } };
    // As the stream carries it (no subscription): not what a webhook gets, which webhookBody makes.
    expect(eventSchema('plan.archived').safeParse(archived).success).toBe(false);
    const sent = webhookBody({ ...archived, id: 'evt_1', wallet_id: 'wal_1' } as EventEnvelope);
    expect(sent).toEqual({ ...archived, data: { subscription_id: '', ...archived.data } });
    expect(eventSchema('plan.archived').safeParse(sent).success).toBe(true);
    expect(WebhookEvent.safeParse(sent).success).toBe(true);
    expect(EventEnvelope.safeParse({ ...archived, id: 'evt_1', wallet_id: 'wal_1' }).success).toBe(true);
    expect(eventSchema('plan.archived').safeParse({ ...sent, data: { ...sent.data, status: undefined } }).success).toBe(false);
    expect(
      eventSchema('nwc.wallet_disabled').safeParse({ event: 'nwc.wallet_disabled', timestamp: 1, data: { ...base, subscription_id: 'sub_1' } }).success,
    ).toBe(false);
  });
});
