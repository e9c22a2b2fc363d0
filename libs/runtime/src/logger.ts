import { pino, type Logger } from 'pino';
import { context, trace } from '@opentelemetry/api';

export type { Logger };

/** JSON logs on stdout; every line written inside a span carries its trace id. Secrets are redacted. */
export function createLogger(service: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    level,
    base: { service },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: ['*.headers["x-api-key"]', '*.headers["x-subscriber-token"]', 'req.headers.authorization', '*.admin_key', '*.invoice_key', '*.access_token'],
      censor: '[redacted]',
    },
    mixin() {
      const ctx = trace.getSpan(context.active())?.spanContext();
      return ctx ? { trace_id: ctx.traceId, span_id: ctx.spanId } : {};
    },
  });
}
