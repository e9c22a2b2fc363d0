import { context, propagation, trace, type Context, type TextMapGetter, type TextMapSetter } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';

let provider: NodeTracerProvider | undefined;

/**
 * Starts tracing for one service. Spans are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT
 * (or ..._TRACES_ENDPOINT) is set; without it spans still exist so logs carry trace ids.
 */
export function initTelemetry(serviceName: string): void {
  if (provider) return;
  const spanProcessors: SpanProcessor[] = [];
  if (process.env.OTEL_EXPORTER_OTLP_ENDPOINT || process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) {
    spanProcessors.push(new BatchSpanProcessor(new OTLPTraceExporter()));
  }
  provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName }),
    spanProcessors,
  });
  provider.register({ propagator: new W3CTraceContextPropagator() });
}

export async function shutdownTelemetry(): Promise<void> {
  await provider?.shutdown().catch(() => undefined);
}

export const tracer = () => trace.getTracer('sats-subscriptions');

/** NATS headers are a MsgHdrs object, not a plain record: the default getter/setter silently do nothing on it. */
interface HeaderLike {
  get(k: string): string;
  set(k: string, v: string): void;
  has(k: string): boolean;
  keys(): string[];
}
const natsSetter: TextMapSetter<HeaderLike> = { set: (h, k, v) => h.set(k, v) };
const natsGetter: TextMapGetter<HeaderLike | undefined> = {
  get: (h, k) => (h && h.has(k) ? h.get(k) : undefined),
  keys: (h) => (h ? h.keys() : []),
};

export function injectTraceHeaders(headers: HeaderLike, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers, natsSetter);
}

export function extractTraceContext(headers: HeaderLike | undefined): Context {
  return propagation.extract(context.active(), headers, natsGetter);
}

export function currentTraceId(): string | undefined {
  const span = trace.getSpan(context.active());
  const id = span?.spanContext().traceId;
  return id && id !== '00000000000000000000000000000000' ? id : undefined;
}
