import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
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
  get: (h, k) => (h?.has(k) ? h.get(k) : undefined),
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

/** A trace context stored with work done later (an outbox row, a webhook delivery): W3C `traceparent` and `tracestate`. */
export type TraceCarrier = Record<string, string>;

/** The active trace context as a carrier to store next to the work it causes; null outside any trace. */
export function traceCarrier(ctx: Context = context.active()): TraceCarrier | null {
  const carrier: TraceCarrier = {};
  propagation.inject(ctx, carrier);
  return carrier.traceparent ? carrier : null;
}

/** The context a stored carrier names (the root context when there is none). */
export function contextOf(carrier: TraceCarrier | null | undefined): Context {
  return carrier ? propagation.extract(ROOT_CONTEXT, carrier) : ROOT_CONTEXT;
}

/**
 * Runs `fn` in a new active span: a child of `parent` (by default the active context), or a root span
 * with `root`. A throw marks the span as failed; the span always ends.
 */
export function inSpan<T>(
  name: string,
  opts: { parent?: Context; root?: boolean; kind?: SpanKind; attributes?: Attributes; links?: Link[] },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = opts.parent ?? context.active();
  return tracer().startActiveSpan(
    name,
    { kind: opts.kind ?? SpanKind.INTERNAL, root: opts.root, attributes: opts.attributes, links: opts.links },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** The JetStream consumer's span for one event: a child of the span that published it (its message headers). */
export function consumeInTrace<T>(subject: string, headers: HeaderLike | undefined, attributes: Attributes, fn: () => Promise<T>): Promise<T> {
  return inSpan(
    `${subject} process`,
    {
      parent: extractTraceContext(headers),
      kind: SpanKind.CONSUMER,
      attributes: { 'messaging.system': 'nats', 'messaging.destination.name': subject, ...attributes },
    },
    fn,
  );
}

/** Links the active span (a sweep) to the trace of an item it works on. */
export function linkActiveSpanTo(carrier: TraceCarrier | null | undefined): void {
  const target = carrier ? trace.getSpanContext(contextOf(carrier)) : undefined;
  if (target) trace.getActiveSpan()?.addLink({ context: target });
}
