import { z } from 'zod';

/**
 * Reads the service's settings from the environment only, validated at start. Every bad variable is
 * named in one line of its own so an operator can fix them all in one go.
 */
export function loadConfig<S extends z.ZodRawShape>(shape: S, env: NodeJS.ProcessEnv = process.env): z.infer<z.ZodObject<S>> {
  const result = z.object(shape).safeParse(env);
  if (result.success) return result.data;
  const lines = result.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
  process.stderr.write(`Invalid configuration:\n${lines.join('\n')}\n`);
  process.exit(1);
}

export const envBool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', ''])
  .optional()
  .transform((v) => v === '1' || v === 'true' || v === 'yes');

/** A switch that is on unless set to 0, false or no. */
export const envBoolOn = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', ''])
  .optional()
  .transform((v) => v !== '0' && v !== 'false' && v !== 'no');

export const envInt = (def: number, min = 0) => z.coerce.number().int().min(min).default(def);

/** Settings every service shares. */
export const commonConfig = {
  DATABASE_URL: z.string().url({ message: 'must be a postgres:// URL' }),
  NATS_URL: z.string().min(1).default('nats://127.0.0.1:4222'),
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
   * Named statements, parsed and planned once per connection. Off behind a pooler that moves a session's
   * transactions between server connections without carrying their prepared statements (PgBouncer in
   * transaction mode before 1.21, or without max_prepared_statements).
   */
  DB_PREPARED_STATEMENTS: envBoolOn,
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
