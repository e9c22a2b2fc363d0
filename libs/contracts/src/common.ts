import { z } from './zod.js';

export const Id = z.string().min(1).max(64);
export const UnixSeconds = z.number().int().nonnegative();

/** A time as the service words it to people (answers and notices): `2026-12-09 14:05 UTC`. */
export const utcMinute = (unix: number) => `${new Date(unix * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;

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

/**
 * Characters refused in names shown to people (a plan, a subscriber, a sender, a merchant): control
 * characters (a line of its own in a message, a mail header), direction overrides and invisible ones that
 * make a name read as something else ("…moc.lapyap"). The joiners emoji and some scripts need are kept.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused.
export const NOT_IN_NAMES = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/;
export const NAME_RULE = 'must be one line of text without invisible or direction-changing characters';
/**
 * An RFC 2047 encoded word (`=?utf-8?b?…?=`): a mail program shows it decoded, in a subject or a sender's
 * name, so it would carry the characters refused in names past the check (found from outside). Names are
 * encoded by the server when it sends; none is taken already encoded.
 */
export const ENCODED_WORD = /=\?[^?\s]+\?[bq]\?[^?\s]*\?=/i;
export const ENCODED_WORD_RULE = 'must be plain text, not an encoded word (=?charset?B?...?=): the server encodes it when sending';

/** A string shown to people as a name (in pages, and in messages' subjects and senders): `NOT_IN_NAMES` and encoded words refused. */
export const shownName = (s: z.ZodString) => s.refine((v) => !NOT_IN_NAMES.test(v), NAME_RULE).refine((v) => !ENCODED_WORD.test(v), ENCODED_WORD_RULE);

/**
 * Free text shown to people (a plan's description): lines, tabs and the marks right-to-left writing needs
 * are kept; other control characters and direction overrides and isolates, which make what follows them
 * read backwards (a price, a link), are refused.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused.
const NOT_IN_TEXT = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\ufeff]/;
export const shownText = (s: z.ZodString) =>
  s.refine((v) => !NOT_IN_TEXT.test(v), 'must be text without control or direction-changing characters (line breaks are fine)');

/** An identifier at a provider, sent in its requests' headers and bodies: printable ASCII, no spaces. */
export const providerId = (s: z.ZodString) => s.regex(/^[\x21-\x7e]+$/, "must be the provider's identifier: letters, digits and punctuation, no spaces");

/** An amount as people read it in messages: "21,000 sats", "1 sat". */
export const satsText = (n: number): string => `${n.toLocaleString('en-US')} ${n === 1 ? 'sat' : 'sats'}`;

/** Text as HTML shows it, in an element or a quoted attribute: the mails' HTML parts and the gateway's pages. */
export const htmlText = (s: string): string => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/**
 * A fiat amount as people read it in messages, with its ISO code: "$21.00 USD", "¥2,100 JPY" (as many
 * decimals as the currency has), "CHF 21.00" (a code that is its own symbol is not said twice).
 */
export function fiatText(amount: number, currency: string): string {
  const code = currency.toUpperCase();
  let shown: string;
  try {
    shown = new Intl.NumberFormat('en-US', { style: 'currency', currency: code }).format(amount);
  } catch {
    // Not an ISO 4217 code Intl knows: the number and the code as given.
    return `${amount.toLocaleString('en-US')} ${code}`;
  }
  return shown.includes(code) ? shown : `${shown} ${code}`;
}

/**
 * An integer query value: a plain decimal string (no sign but "-", no spaces or leading zeros) becomes a
 * number; anything else (absent, empty, not a number, out of range) is refused with a sentence that says so and names the bounds, not zod's "received NaN".
 */
export function QueryInt(min: number, max = Number.MAX_SAFE_INTEGER) {
  // One sentence for a non-number and a number out of range alike: it names the bounds.
  const expected = max === Number.MAX_SAFE_INTEGER ? `Expected an integer of at least ${min}` : `Expected an integer from ${min} to ${max}`;
  return z.preprocess(
    // Only a plain decimal integer is a number here: Number() would also take " 10", "+10", "010", "1e1"
    // and "0x1", so one value would have many spellings (and caches and logs would tell them apart).
    // Past 2^53 the number would not be the one written: left a string, it is refused once as not a number.
    (v) => (typeof v === 'string' && /^(0|-?[1-9]\d*)$/.test(v) && Number.isSafeInteger(Number(v)) ? Number(v) : v),
    z
      .number({ error: (i) => (i.input === undefined ? 'Field required' : expected) })
      .int()
      .min(min)
      .max(max),
  );
}

export const PaginationQuery = z.strictObject({
  limit: QueryInt(1, 200).default(50),
  offset: QueryInt(0).default(0),
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
export const ErrorBody = z.object({ detail: z.union([z.string(), z.array(ValidationIssue)]) }).openapi('Error');
export type ErrorBody = z.infer<typeof ErrorBody>;

export const SuccessMessageResponse = z.object({ success: z.boolean(), message: z.string() }).openapi('SuccessMessageResponse');
export type SuccessMessageResponse = z.infer<typeof SuccessMessageResponse>;

/**
 * A partial update's body with at least one of its fields: a request with nothing to change is refused
 * (422) rather than answered as a change, with a new `updated_at` and nothing else different.
 */
export function someField<T extends z.ZodObject>(schema: T): T {
  const names = Object.keys(schema.shape);
  return schema.refine((b: Record<string, unknown>) => names.some((k) => b[k] !== undefined), {
    message: `Give at least one of ${names.join(', ')}`,
  });
}

export const IdParams = z.strictObject({ id: Id });
export const EmptyObject = z.strictObject({});

/**
 * At most this many issues in a 422, and one more saying how many were left out: the first ones say what
 * to fix, and one issue per item of a long list made a 60 KB request answer megabytes.
 */
export const MAX_VALIDATION_ISSUES = 20;

/**
 * zod issues as the API's 422 detail, `loc` starting with where the value came from (body, query, path).
 * A field that is absent reads "Field required" (type `missing`), as an absent body does: told apart from
 * a wrong value by the issue's input, so the issues must come from a parse with `reportInput`.
 */
export function toValidationDetail(issues: readonly z.core.$ZodIssue[], where: string): ValidationIssue[] {
  const detail: ValidationIssue[] = [];
  // Where each list of allowed values was first said: a list repeated for every wrong item of an array
  // was most of a 15 MB answer.
  const listedAt = new Map<string, string>();
  // Values of the wrong type: zod 4 still runs an array's length checks on a string there, and said
  // "expected string to have <=10 characters" of a list (found from outside).
  const wrongType = new Set<string>();
  let total = 0;
  for (const i of issues) {
    const loc = [where, ...i.path.map((p) => (typeof p === 'symbol' ? String(p) : p))];
    const at = JSON.stringify(loc);
    if (i.code === 'invalid_type') wrongType.add(at);
    else if (wrongType.has(at)) continue;
    // One issue per unknown field, located at it (zod reports them together at the object).
    if (i.code === 'unrecognized_keys') {
      for (const k of i.keys.slice(0, Math.max(0, MAX_VALIDATION_ISSUES - detail.length))) {
        detail.push({ loc: [...loc, k], msg: 'Unrecognized field', type: i.code });
      }
      total += i.keys.length;
      continue;
    }
    total++;
    if (detail.length >= MAX_VALIDATION_ISSUES) continue;
    if (i.code === 'invalid_type' && 'input' in i && i.input === undefined) {
      detail.push({ loc, msg: 'Field required', type: 'missing' });
    } else if (i.code === 'invalid_value' && i.values.length > 1) {
      const first = listedAt.get(i.message);
      if (!first) listedAt.set(i.message, loc.join('.'));
      detail.push({ loc, msg: first ? `Invalid option: expected one of the values listed for ${first}` : i.message, type: i.code });
    } else {
      detail.push({ loc, msg: i.message, type: i.code });
    }
  }
  if (total > detail.length) {
    detail.push({ loc: [where], msg: `${total - detail.length} more issues left out: fix these and send again`, type: 'too_many_issues' });
  }
  return detail;
}

/** How deep a JSON value may nest: no contract goes past a handful of levels (metadata is flat). */
export const MAX_JSON_DEPTH = 32;

// NUL (PostgreSQL text cannot hold it) and UTF-16 surrogates without their pair (not Unicode text; the
// driver would silently turn them into U+FFFD). Neither can be stored as given.
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding NUL is the point of this expression.
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function isStorableText(s: string): boolean {
  return !UNSTORABLE.test(s);
}

/**
 * Text from elsewhere (a wallet's or a provider's error message) as it can be stored and announced: NUL
 * and unpaired surrogates as U+FFFD, cut to at most `max` characters, never inside one. Found from
 * outside: a wallet's message with a NUL failed the attempt's record, and its failure was never counted.
 */
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, 'g');
export function storableText(s: string, max: number): string {
  const clean = s.replace(UNSTORABLE_ALL, '\uFFFD');
  return clean.length <= max ? clean : Array.from(clean).slice(0, max).join('');
}

/** JSON's insignificant whitespace (RFC 8259): what may stand between a key and its colon. */
const JSON_SPACE = new Set([' ', '\t', '\n', '\r']);

/**
 * The first key given twice in one object of a JSON text that parsed (`JSON.parse` keeps the last, so a
 * proxy or log reading the first sees another request than the service acts on: found from outside), as
 * the API's 422 detail; empty when every key of every object is given once. Keys are compared decoded
 * ("a" and "\u0061" are one key). A single pass, without recursion (the text may nest deep).
 */
export function duplicateKeyIssues(text: string, where: string): ValidationIssue[] {
  // The open objects and arrays, outermost first: each one's key or index now is the path to the next.
  const stack: Array<{ keys: Set<string> | null; key: string; index: number }> = [];
  for (let i = 0; i < text.length; ) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      let escaped = false;
      for (; j < text.length && text[j] !== '"'; j++) {
        if (text[j] === '\\') {
          escaped = true;
          j++;
        }
      }
      const quoted = text.slice(i, j + 1);
      i = j + 1;
      const f = stack.at(-1);
      if (!f?.keys) continue;
      let k = i;
      while (JSON_SPACE.has(text[k]!)) k++;
      // A string in an object followed by a colon is a key (any other is a value).
      if (text[k] !== ':') continue;
      const key: string = escaped ? JSON.parse(quoted) : quoted.slice(1, -1);
      if (f.keys.has(key)) {
        const loc = [where, ...stack.slice(0, -1).map((o) => (o.keys ? o.key : o.index)), key];
        return [{ loc, msg: 'Duplicate key: each key may appear once in an object', type: 'key_duplicate' }];
      }
      f.keys.add(key);
      f.key = key;
      i = k + 1;
    } else if (c === '{' || c === '[') {
      stack.push({ keys: c === '{' ? new Set() : null, key: '', index: 0 });
      i++;
    } else {
      if (c === '}' || c === ']') stack.pop();
      else if (c === ',' && stack.at(-1)?.keys === null) stack.at(-1)!.index++;
      i++;
    }
  }
  return [];
}

/**
 * The edge's one check of a request part (path, query or body) before any schema or other work: every
 * string, object keys included, must be storable text, and the value no deeper than MAX_JSON_DEPTH
 * (deeper values overflow JSON.stringify and every recursive walk after it). Iterative, so a hostile
 * depth cannot overflow the check itself. Answers the issues as the API's 422 detail (empty: fine).
 */
export function unstorableIssues(value: unknown, where: string): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const stack: Array<{ v: unknown; loc: Array<string | number>; depth: number }> = [{ v: value, loc: [where], depth: 0 }];
  while (stack.length && issues.length < 20) {
    const { v, loc, depth } = stack.pop()!;
    if (typeof v === 'string') {
      if (!isStorableText(v)) issues.push({ loc, msg: 'Text must not contain NUL characters or unpaired surrogates', type: 'string_unstorable' });
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (depth >= MAX_JSON_DEPTH) {
      issues.push({ loc: [where], msg: `Nested deeper than ${MAX_JSON_DEPTH} levels`, type: 'too_deep' });
      break;
    }
    for (const [k, child] of Object.entries(v)) {
      const key = Array.isArray(v) ? Number(k) : k;
      if (typeof key === 'string' && !isStorableText(key)) {
        issues.push({
          loc: [...loc, storableText(key, key.length)],
          msg: 'Keys must not contain NUL characters or unpaired surrogates',
          type: 'key_unstorable',
        });
        continue;
      }
      // JavaScript objects cannot hold it as data: the schemas drop it, and a metadata write would
      // silently lose it (and what it replaced).
      if (key === '__proto__') {
        issues.push({ loc: [...loc, key], msg: 'A key named __proto__ is not accepted', type: 'key_unstorable' });
        continue;
      }
      stack.push({ v: child, loc: [...loc, key], depth: depth + 1 });
    }
  }
  return issues;
}

/**
 * A raw query string's values that are not UTF-8 once percent-decoded (`%ED%A0%80`, a lone surrogate):
 * the query parser would silently turn them into U+FFFD, so they are refused by name instead.
 */
export function undecodableQueryIssues(rawQuery: string): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const decode = (s: string) => decodeURIComponent(s.replace(/\+/g, ' '));
  for (const pair of rawQuery.split('&')) {
    const eq = pair.indexOf('=');
    const [k, v] = eq < 0 ? [pair, ''] : [pair.slice(0, eq), pair.slice(eq + 1)];
    let name: string;
    try {
      name = decode(k);
    } catch {
      issues.push({ loc: ['query'], msg: 'Parameter names must be UTF-8', type: 'string_unstorable' });
      continue;
    }
    try {
      decode(v);
    } catch {
      issues.push({ loc: ['query', name], msg: 'Text must be UTF-8 without unpaired surrogates', type: 'string_unstorable' });
    }
  }
  return issues;
}

/**
 * Telegram's identifiers as the Bot API takes them, one rule wherever one is taken: a chat id has at most
 * 52 significant bits (16 digits; a group's is negative), a username is 4 (auctioned ones) to 32
 * letters, digits and underscores, from a letter.
 */
const TELEGRAM_CHAT_ID = String.raw`-?\d{1,16}`;
const TELEGRAM_NAME = '[A-Za-z][A-Za-z0-9_]{3,31}';
export const telegram = {
  chatId: new RegExp(`^${TELEGRAM_CHAT_ID}$`),
  /** A username as Telegram sends it, without its @. */
  username: new RegExp(`^${TELEGRAM_NAME}$`),
  /** A subscriber's chat: a chat id, or a username with or without its @. */
  subscriberChat: new RegExp(`^(${TELEGRAM_CHAT_ID}|@?${TELEGRAM_NAME})$`),
  /** An owner's chat: a chat id, or a channel's @username (the Bot API needs the @ there). */
  ownerChat: new RegExp(`^(${TELEGRAM_CHAT_ID}|@${TELEGRAM_NAME})$`),
  /** The rule in words, for a refusal. */
  rule: 'a chat id of up to 16 digits, or a username of 4 to 32 letters, digits or _ starting with a letter',
};

/**
 * A subscriber's Telegram contact as a request gives it (the rule is checked by billing, after trimming):
 * too long for any chat is refused in the same words (found from outside: "at most 100 characters" for a
 * username of 4 to 32).
 */
export const subscriberMessenger = () =>
  z
    .string()
    .max(100, { error: `must be a Telegram chat: ${telegram.rule}` })
    .openapi({ description: 'Telegram username (with or without @) or numeric chat id' });

/**
 * An e-mail address as a request gives it, refused in the checkout page's own words (found from outside:
 * the page said "Enter an e-mail address like name@example.com", the service "Invalid email address").
 */
export const emailAddress = () =>
  z
    .string()
    .check(z.email({ error: 'must be an e-mail address like name@example.com' }))
    .max(254);
