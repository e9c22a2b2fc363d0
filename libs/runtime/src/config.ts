import { z } from 'zod';

/**
 * Reads the service's settings from the environment only, validated at start. Every bad variable is
 * named in one line of its own so an operator can fix them all in one go.
 */
export function loadConfig<S extends z.ZodRawShape>(shape: S, env: NodeJS.ProcessEnv = process.env): z.infer<z.ZodObject<S>> {
  const result = z.object(shape).safeParse(setOnly(env));
  if (result.success) return result.data;
  const lines = result.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
  process.stderr.write(`Invalid configuration:\n${lines.join('\n')}\n`);
  process.exit(1);
}

/**
 * The variables with a value: an empty one is taken as unset (its default), for every setting. `PORT=${PORT}`
 * in a compose file or a Kubernetes manifest gives an empty string when the operator set nothing (found
 * from outside: an empty LOG_LEVEL, LIGHTNING_PROVIDER, PUBLIC_BASE_URL or SMTP_URL stopped the service).
 */
export function setOnly(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([, v]) => v !== ''));
}

/**
 * A setting the process cannot start with, found after the environment was read (a port another process
 * holds): said in one line naming the variable, without a stack, like the checks of loadConfig.
 */
export class SettingError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
  }
}

export const envBool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no'])
  .optional()
  .transform((v) => v === '1' || v === 'true' || v === 'yes');

/** A switch that is on unless set to 0, false or no. */
export const envBoolOn = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no'])
  .optional()
  .transform((v) => v !== '0' && v !== 'false' && v !== 'no');

/** A whole number of at least `min` (unset or empty: `def`, see setOnly). */
export const envInt = (def: number, min = 0) => z.coerce.number().int().min(min).default(def);

const PORT_MESSAGE = { error: 'must be a port number from 1 to 65535' };
/** A TCP port to listen on (empty: the default). */
export const envPort = (def: number) => z.coerce.number(PORT_MESSAGE).int(PORT_MESSAGE).min(1, PORT_MESSAGE).max(65535, PORT_MESSAGE).default(def);

/**
 * One address or several, comma-separated (a cluster), each `nats://`, `tls://`, `ws://` or `wss://`
 * (or a bare host:port) with a host and an optional port: a malformed one is a setting to fix, said at
 * start rather than thrown by the client as "Invalid URL" on the first connect.
 */
export const natsUrl = z.string().refine(
  (v) =>
    v.split(',').every((part) => {
      const u = part.trim();
      if (!u) return false;
      try {
        const url = new URL(/^[a-z]+:\/\//i.test(u) ? u : `nats://${u}`);
        return /^(nats|tls|ws|wss):$/.test(url.protocol) && !!url.hostname && (url.pathname === '' || url.pathname === '/') && !url.search && !url.hash;
      } catch {
        return false;
      }
    }),
  'must be nats://host[:port] (or tls://, ws://, wss://; several comma-separated)',
);

/**
 * A PostgreSQL URL with a user: other schemes, and one pg would connect with no user name (and fail
 * deep inside the driver), are refused at start.
 */
export const postgresUrl = z.string().refine((v) => {
  try {
    const u = new URL(v);
    return /^postgres(ql)?:$/.test(u.protocol) && !!u.username && (!!u.hostname || u.searchParams.has('host'));
  } catch {
    return false;
  }
}, 'must be postgres://user[:password]@host[:port]/database (or postgresql://)');

/** Settings every service shares. */
export const commonConfig = {
  DATABASE_URL: postgresUrl,
  NATS_URL: natsUrl.default('nats://127.0.0.1:4222'),
  /** The service's own NATS user (its subject permissions are generated from the contracts); unset: no authentication. */
  NATS_USER: z
    .string()
    .regex(/^[a-z]+$/, 'a service name')
    .optional(),
  NATS_PASSWORD: z.string().optional(),
  /** PEM file of the CA that signed the NATS server's certificate: the connection then requires TLS. */
  NATS_TLS_CA_FILE: z.string().min(1).optional(),
  /** Copies of the EVENTS stream in a NATS cluster (3 on a 3-server cluster: one lost server loses nothing). */
  NATS_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  /**
   * How long the EVENTS stream keeps an event (its `max_age`): longer than any consumer may be away, short
   * enough that the stream's disk is not filled by years of events (JetStream then refuses every publish).
   */
  EVENTS_MAX_AGE_DAYS: z.coerce.number().int().min(1).max(3650).default(30),
  /** How long a service keeps an outbox row once it is on the stream (its table would grow for ever). */
  OUTBOX_RETENTION_DAYS: z.coerce.number().int().min(1).max(3650).default(7),
  /**
   * Named statements, parsed and planned once per connection. Off behind a pooler that moves a session's
   * transactions between server connections without carrying their prepared statements (PgBouncer in
   * transaction mode before 1.21, or without max_prepared_statements).
   */
  DB_PREPARED_STATEMENTS: envBoolOn,
  /** Connections of each of a process's two pools (the key look-ups' own and the rest). */
  DB_POOL_MAX: envInt(10, 1),
  /**
   * Look-ups by key outside a transaction on connections of their own that keep one plan per statement
   * (`keyLookup`). Off behind a pooler in transaction mode: their session setting would stay on the server
   * connection and reach other clients' transactions.
   */
  DB_KEY_LOOKUP_POOL: envBoolOn,
  /**
   * The server cancels a statement running longer (statement_timeout: 503, redelivery); one not answered
   * within 2 s more has its connection dropped: a database that hangs (frozen host, network black hole)
   * would otherwise hold the request and the pooled connection for as long as TCP keeps the socket open.
   */
  DB_QUERY_TIMEOUT_MS: envInt(10_000, 100),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  DEV_MODE: envBool,
  /** Older SECRETS_KEYs (comma-separated) that still open what they sealed, during a key rotation. */
  SECRETS_KEY_PREVIOUS: z
    .string()
    .regex(/^[0-9a-fA-F]{64}(,[0-9a-fA-F]{64})*$/, 'comma-separated keys of 32 bytes of hex (64 characters)')
    .optional(),
};
