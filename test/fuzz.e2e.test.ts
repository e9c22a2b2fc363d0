import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client } from './support/http.js';
import { startStack, type Stack } from './support/stack.js';

/**
 * Property-based fuzzing of every operation of our own OpenAPI document, as served: generated valid,
 * malformed and boundary inputs (wrong types, missing and extra fields, huge and unicode strings, NUL and
 * unpaired surrogates, numbers at the edges, malformed ids, non-JSON, wrong content types, deep nesting),
 * with and without credentials and Idempotency-Key. Every answer must be documented for its operation and
 * valid against the document, never 5xx, never slow enough to be a hang; every service is healthy after.
 * Generic over the document: operations added later are fuzzed as they appear in it.
 *
 * FUZZ_RUNS (default 40) requests per operation; FUZZ_SEED replays a failing run (fast-check prints it).
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 40);
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;
/** A request not answered by then counts as a hang (the gateway's own bus timeout is 20 s in tests). */
const HANG_MS = 30_000;

let stack: Stack;
let doc: any;
let validate: (status: number, op: any, body: unknown, type: string | null) => string | null;
let ids: string[] = [];
let keys: { admin: string; invoice: string; otherAdmin: string; token: string };

beforeAll(async () => {
  stack = await startStack({
    wallets: 2,
    env: {
      ONCHAIN_PROVIDER: 'dev',
      CARDPROC_PROVIDER: 'dev',
      WALLETPROC_PROVIDER: 'dev',
      FIAT_RATE_FIXED: '80000',
      PUBLIC_BASE_URL: 'http://pay.example.test',
      LOG_LEVEL: 'warn',
    },
  });
  const [w1, w2] = stack.wallets as [Stack['wallets'][0], Stack['wallets'][0]];
  const admin = client(stack.api, w1.admin_key);
  const other = client(stack.api, w2.admin_key);
  const anon = client(stack.api);
  // Real ids of both wallets, so generated requests also reach the handlers' deeper paths.
  const plan = (await admin.post('/plans', { name: 'Fuzz', amount_sats: 1000, interval: 'monthly', allow_onchain: true })).body;
  const trial = (await admin.post('/plans', { name: 'Fuzz trial', amount_sats: 1000, interval: 'weekly', trial_days: 3 })).body;
  const theirs = (await other.post('/plans', { name: 'Theirs', amount_sats: 1000, interval: 'weekly' })).body;
  const checkout = (await anon.post('/public/subscribe', { plan_id: plan.id, payment_method: 'lightning', email: 'fuzz@example.com' })).body;
  const trialSub = (await anon.post('/public/subscribe', { plan_id: trial.id, payment_method: 'lightning', email: 'fuzz-trial@example.com' })).body;
  const endpoint = (await admin.post('/webhook-endpoints', { url: 'https://93.184.216.34/hook' })).body;
  const subscriber = (await admin.get(`/subscriptions/${trialSub.subscription_id}`)).body.subscriber_id;
  ids = [plan.id, trial.id, theirs.id, checkout.payment_id, checkout.subscription_id, trialSub.subscription_id, endpoint.id, subscriber].filter(Boolean);
  expect(ids).toHaveLength(8);
  keys = { admin: w1.admin_key, invoice: w1.invoice_key, otherAdmin: w2.admin_key, token: new URL(trialSub.manage_url).searchParams.get('token')! };

  doc = (await anon.get('/openapi.json')).body;
  const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true });
  addFormats(ajv);
  ajv.addSchema({ $id: 'https://openapi.local/doc', components: doc.components });
  const compiled = new Map<object, ReturnType<typeof ajv.compile>>();
  const withRefs = (schema: object) => JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"https://openapi.local/doc#/components/'));
  validate = (status, op, body, type) => {
    const declared = op.responses[String(status)] ?? op.responses[`${String(status)[0]}XX`];
    if (!declared) return `status ${status} is not documented`;
    const media = (type ?? '').split(';')[0]!.trim();
    if (!declared.content)
      return body === undefined || body === '' ? null : `status ${status} documents no body, got ${String(JSON.stringify(body)).slice(0, 200)}`;
    if (!declared.content[media]) return `status ${status} answered ${media || 'no content type'}, documented: ${Object.keys(declared.content).join(', ')}`;
    const schema = declared.content[media].schema;
    // Only JSON answers are checked against a schema (an HTML page has its media type checked above).
    if (!schema || !media.endsWith('json')) return null;
    let v = compiled.get(schema);
    if (!v) compiled.set(schema, (v = ajv.compile(withRefs(schema))));
    return v(body) ? null : `body of ${status} breaks the document: ${ajv.errorsText(v.errors)}: ${String(JSON.stringify(body)).slice(0, 300)}`;
  };
});
afterAll(async () => {
  await stack?.stop();
});

// ---- generators -------------------------------------------------------------------------------------

const nastyStrings = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\ud800',
  'x\udc00',
  '\ud83d\ude00',
  '\u202e',
  'null',
  'undefined',
  '0',
  '-1',
  '1e309',
  '<script>',
  "' OR 1=1 --",
  '../../etc/passwd',
  '%00',
  '\\',
  '"',
  'x'.repeat(300),
  'é'.repeat(2000),
  'plan_',
  'sub_01ZZZZZZZZZZZZZZZZZZZZZZZZ',
];
const nastyNumbers = [0, -1, 1, 2 ** 31, -(2 ** 31), 2 ** 53, -(2 ** 53), 1.5, 1e308, -1e308, Number.MIN_VALUE];
const nastyValue = fc.oneof(
  fc.constantFrom<unknown>(null, true, false, [], {}, [[[]]], { a: { b: { c: {} } } }),
  fc.constantFrom(...nastyStrings),
  fc.constantFrom(...nastyNumbers),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)), maxLength: 3 }),
);

function resolve(schema: any): any {
  if (schema?.$ref) return resolve(doc.components.schemas[schema.$ref.split('/').pop()]);
  return schema ?? {};
}

/** Values a schema accepts (roughly: valid enough to pass the gateway and reach the handlers). */
function valid(schemaIn: any, name = '', depth = 0): fc.Arbitrary<unknown> {
  const s = resolve(schemaIn);
  if (s.anyOf || s.oneOf) return fc.oneof(...(s.anyOf ?? s.oneOf).map((x: any) => valid(x, name, depth)));
  if (s.allOf)
    return fc.tuple(...s.allOf.map((x: any) => valid(x, name, depth))).map((parts) => Object.assign({}, ...parts.filter((p) => p && typeof p === 'object')));
  if (s.const !== undefined) return fc.constant(s.const);
  if (s.enum) return fc.constantFrom(...s.enum);
  const type = Array.isArray(s.type) ? s.type : [s.type ?? 'object'];
  return fc.oneof(...type.map((t: string) => validOfType(s, t, name, depth)));
}

function validOfType(s: any, type: string, name: string, depth: number): fc.Arbitrary<unknown> {
  switch (type) {
    case 'null':
      return fc.constant(null);
    case 'boolean':
      return fc.boolean();
    case 'integer':
      return fc.integer({ min: Math.max(s.minimum ?? -1000, -(2 ** 31)), max: Math.min(s.maximum ?? 100_000, 2 ** 31) });
    case 'number':
      return fc.double({ min: s.minimum ?? -1e6, max: s.maximum ?? 1e6, noNaN: true });
    case 'string': {
      if (/(^|_)id$/.test(name)) return fc.constantFrom(...ids, 'plan_01NOSUCH', 'x');
      if (s.format === 'email') return fc.constantFrom('a@example.com', 'fuzz+1@example.com', 'not-an-email');
      if (s.format === 'uri' || name === 'url') return fc.constantFrom('https://93.184.216.34/h', 'http://127.0.0.1/x', 'ftp://x', 'not a url');
      return fc.string({ minLength: s.minLength ?? 0, maxLength: Math.min(s.maxLength ?? 30, 30) });
    }
    case 'array':
      return depth > 3 ? fc.constant([]) : fc.array(valid(s.items ?? {}, name, depth + 1), { maxLength: 3 });
    default: {
      if (depth > 3) return fc.constant({});
      const props = Object.entries<any>(s.properties ?? {});
      if (!props.length) return fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 3 });
      return fc.record(Object.fromEntries(props.map(([k, v]) => [k, valid(v, k, depth + 1)])), { requiredKeys: s.required ?? [] });
    }
  }
}

/** A valid value with one thing broken: a field dropped, added or set to something hostile. */
function mutated(schema: any): fc.Arbitrary<unknown> {
  return fc.tuple(valid(schema), fc.nat(), nastyValue, fc.constantFrom('drop', 'set', 'add')).map(([v, i, nasty, how]) => {
    if (!v || typeof v !== 'object' || Array.isArray(v)) return nasty;
    const o = { ...(v as Record<string, unknown>) };
    const fields = Object.keys(resolve(schema).properties ?? o);
    const field = fields.length ? fields[i % fields.length]! : 'extra';
    if (how === 'drop') delete o[field];
    else if (how === 'set') o[field] = nasty;
    else o[`extra_${i % 7}`] = nasty;
    return o;
  });
}

const deepJson = fc.integer({ min: 30, max: 15_000 }).map((n) => '['.repeat(n) + ']'.repeat(n));

/** The raw body to send (undefined: none) and its content type. */
function bodyFor(op: any): fc.Arbitrary<{ raw?: string; type?: string; encoding?: string }> {
  const schema = op.requestBody?.content?.['application/json']?.schema;
  const json = (a: fc.Arbitrary<unknown>) => a.map((v) => ({ raw: JSON.stringify(v), type: 'application/json' }));
  return fc.oneof(
    { arbitrary: schema ? json(valid(schema)) : fc.constant({}), weight: 4 },
    { arbitrary: schema ? json(mutated(schema)) : fc.constant({}), weight: 4 },
    { arbitrary: json(fc.jsonValue({ maxDepth: 4 })), weight: 1 },
    { arbitrary: json(nastyValue), weight: 1 },
    { arbitrary: deepJson.map((raw) => ({ raw, type: 'application/json' })), weight: 1 },
    {
      arbitrary: fc.constantFrom(
        { raw: '{"a":', type: 'application/json' },
        { raw: 'not json', type: 'text/plain' },
        { raw: '<x/>', type: 'application/xml' },
        { raw: '{}', type: 'application/json; charset=klingon' },
        { raw: '\u0000\u0001', type: 'application/octet-stream' },
        { raw: '{}', type: 'application/json', encoding: 'zstd' },
        { raw: 'x'.repeat(70_000), type: 'application/json' },
        { raw: '', type: 'application/json' },
        { raw: 'a=1&b=2', type: 'application/x-www-form-urlencoded' },
      ),
      weight: 2,
    },
    { arbitrary: fc.constant({}), weight: 1 },
  );
}

const badSegments = ['%00', '%ED%A0%80', '%', '%zz', '%2F', '..%2F..', 'x'.repeat(80), '%F0%9F%98%80', '-1', '0', 'null', '%20'];
// `.` and `..` are dot segments: the URL itself drops them, so they would name another path, not a bad id.
const segment = () =>
  fc
    .oneof(fc.constantFrom(...ids), fc.constantFrom(...badSegments), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }).map(encodeURIComponent))
    .filter((x) => !/^(\.|%2e)+$/i.test(x));

function queryFor(op: any): fc.Arbitrary<string> {
  const params = (op.parameters ?? []).filter((p: any) => p.in === 'query');
  const one = (p: any) =>
    fc.option(
      fc
        .oneof(
          { arbitrary: valid(p.schema, p.name).map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))), weight: 3 },
          { arbitrary: fc.constantFrom(...nastyStrings.filter((x) => x.isWellFormed()), ...nastyNumbers.map(String), '%ED%A0%80'), weight: 1 },
        )
        .map((v) => `${p.name}=${v === '%ED%A0%80' ? v : encodeURIComponent(v)}`),
      { nil: '' },
    );
  return fc
    .tuple(fc.tuple(...params.map(one)), fc.option(fc.constantFrom('extra=1', 'limit=1&limit=2', '%00=1', 'a[b]=c', '=', '&&'), { nil: '', freq: 4 }))
    .map(([parts, extra]) => [...(parts as string[]), extra].filter(Boolean).join('&'));
}

function headersFor(op: any): fc.Arbitrary<Record<string, string>> {
  const scheme = Object.keys(op.security?.[0] ?? {})[0];
  const right: Record<string, string>[] =
    scheme === 'AdminKey'
      ? [{ 'X-Api-Key': keys.admin }]
      : scheme === 'InvoiceKey'
        ? [{ 'X-Api-Key': keys.admin }, { 'X-Api-Key': keys.invoice }]
        : scheme === 'SubscriberToken'
          ? [{ 'X-Subscriber-Token': keys.token }]
          : [{}];
  const wrong = fc.constantFrom<Record<string, string>>(
    {},
    { 'X-Api-Key': keys.invoice },
    { 'X-Api-Key': keys.otherAdmin },
    { 'X-Api-Key': 'f'.repeat(64) },
    { 'X-Api-Key': '\u00e9' },
    { 'X-Subscriber-Token': '0'.repeat(64) },
    { 'X-Api-Key': keys.admin, 'X-Subscriber-Token': keys.token },
  );
  // Mostly the right credentials, so requests get past auth to the checks behind it.
  const auth = fc.oneof({ arbitrary: fc.constantFrom(...right), weight: 4 }, { arbitrary: wrong, weight: 1 });
  const idem = fc.option(
    fc.oneof(
      fc.constantFrom('k1', 'k2', 'x'.repeat(300), ''),
      fc.string({ minLength: 1, maxLength: 20 }).filter((s) => /^[\x21-\x7e]+$/.test(s)),
    ),
    { nil: undefined },
  );
  // Now and then headers over Node's 16 KiB limit (431); sent as a marker, so a failure prints short.
  const huge = fc.integer({ min: 0, max: 39 }).map((n) => n === 0);
  return fc.tuple(auth, idem, huge).map(([a, k, h]) => ({ ...a, ...(k !== undefined ? { 'Idempotency-Key': k } : {}), ...(h ? { 'X-Filler': 'HUGE' } : {}) }));
}

async function send(method: string, url: string, headers: Record<string, string>, body: { raw?: string; type?: string; encoding?: string }) {
  const h: Record<string, string> = { ...headers };
  if (h['X-Filler'] === 'HUGE') h['X-Filler'] = 'x'.repeat(20_000);
  if (body.type) h['Content-Type'] = body.type;
  if (body.encoding) h['Content-Encoding'] = body.encoding;
  const started = Date.now();
  const res = await fetch(url, { method, headers: h, body: body.raw, signal: AbortSignal.timeout(HANG_MS) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* not JSON: the schema check reports it */
  }
  return { status: res.status, body: parsed, type: res.headers.get('content-type'), ms: Date.now() - started };
}

// ---- the properties ---------------------------------------------------------------------------------

describe('fuzzing every operation of the OpenAPI document', () => {
  it('answers every generated request with a documented, schema-valid 4xx/2xx, never a 5xx or a hang', async () => {
    const ops = Object.entries<any>(doc.paths).flatMap(([path, item]) => Object.entries<any>(item).map(([method, op]) => ({ path, method, op })));
    expect(ops.length).toBeGreaterThan(40);
    const statuses: Record<string, number> = {};
    for (const { path, method, op } of ops) {
      const pathParams = (path.match(/\{\w+\}/g) ?? []).length;
      const request = fc.record({
        segments: fc.array(segment(), { minLength: pathParams, maxLength: pathParams }),
        query: queryFor(op),
        headers: headersFor(op),
        body:
          method === 'get'
            ? fc.oneof(
                fc.constant({}),
                bodyFor(op).filter((b) => (b.raw ?? '').length < 1000),
              )
            : bodyFor(op),
      });
      await fc.assert(
        fc.asyncProperty(request, async (r) => {
          let i = 0;
          const url = `${stack.api}${path.replace(/\{\w+\}/g, () => r.segments[i++]!)}${r.query ? `?${r.query}` : ''}`;
          // fetch refuses a body on GET: a GET carries none.
          const res = await send(method.toUpperCase(), url, r.headers, method === 'get' ? {} : r.body);
          statuses[res.status] = (statuses[res.status] ?? 0) + 1;
          const where = `${method.toUpperCase()} ${url.slice(stack.api.length, stack.api.length + 200)} ${JSON.stringify(r.headers).slice(0, 120)} body=${(r.body.raw ?? '').slice(0, 200)}`;
          expect(res.status, `${where} -> ${String(JSON.stringify(res.body)).slice(0, 300)}`).toBeLessThan(500);
          const problem = validate(res.status, op, res.body, res.type);
          expect(problem, where).toBeNull();
        }),
        { numRuns: RUNS, ...(SEED !== undefined ? { seed: SEED } : {}), endOnFailure: true },
      );
    }
    console.log(`fuzz: ${ops.length} operations x ${RUNS} requests; statuses ${JSON.stringify(statuses)}`);
    // The generators reach past the edge: successes as well as refusals.
    expect(
      Object.keys(statuses)
        .map(Number)
        .some((s) => s < 300),
    ).toBe(true);
    expect(
      Object.keys(statuses)
        .map(Number)
        .some((s) => s === 422),
    ).toBe(true);
  });

  it('leaves every service healthy and ready', async () => {
    for (const [name, svc] of Object.entries(stack.services)) {
      for (const probe of ['/healthz', '/readyz']) {
        const r = await fetch(`${svc.url}${probe}`, { signal: AbortSignal.timeout(5000) });
        expect(r.status, `${name}${probe}`).toBe(200);
      }
      expect(
        svc.lines.filter((l) => /"level":(50|60)/.test(l)),
        `${name} logged errors`,
      ).toEqual([]);
    }
  });
});
