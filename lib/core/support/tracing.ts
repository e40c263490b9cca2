/**
 * OpenTelemetry tracing, with `@opentelemetry/api` as an optional peer: it is imported (dynamically, once)
 * only when tracing is on and the package is installed; without it nothing here is loaded and every
 * caller sees `undefined`. The trace context travels in the task envelope as W3C `traceparent` /
 * `tracestate` strings, written and read here whatever propagator the app registered, so a producer and
 * a worker in different processes (or languages) join one trace.
 */
import type * as OtelApi from '@opentelemetry/api';
import { PACKAGE_VERSION } from './version.generated.js';

/** The W3C trace context a task carries (envelope fields of the same names). */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate?: string;
}

/** `messaging.system` of our spans. */
export const MESSAGING_SYSTEM = 'nestjs-redis-tasks';

/** A PRODUCER span of one `emit` / `send` / `emitBatch` call. */
export interface ProducerTrace {
  /** False when nothing records it and there is no context to pass on (the API without an SDK): skip it. */
  readonly live: boolean;
  /** The context to store with each task of the call; undefined when there is none to propagate. */
  readonly context?: TraceContext;
  /** The call enqueued these tasks (ids) or failed. Ends the span. */
  end(ids: readonly string[] | undefined, error?: unknown): void;
}

/** The CONSUMER span of one run of a task. */
export interface ConsumerTrace {
  /** Runs `fn` with the span active, so the handler's own spans are its children. */
  within<T>(fn: () => T): T;
  event(
    name: 'retry scheduled' | 'dead-lettered' | 'lease lost' | 'cancelled' | 'replaced',
    attributes?: Record<string, string | number>,
  ): void;
  /** The run failed: its exception recorded and the span's status set to error. */
  failed(error: unknown): void;
  end(): void;
}

/** What a run's span is about. */
export interface ConsumedTask {
  readonly pattern: string;
  readonly id: string;
  readonly clientId: string;
  readonly attempt: number;
  readonly group: string;
  readonly workerId: string;
  readonly traceparent?: unknown;
  readonly tracestate?: unknown;
}

export interface TaskTracing {
  produce(operation: 'emit' | 'send', pattern: string, clientId: string, count: number): ProducerTrace;
  /** Undefined when nothing would record the span and there is no parent to join (the API without an SDK). */
  consume(task: ConsumedTask): ConsumerTrace | undefined;
}

let loaded: Promise<typeof OtelApi | undefined> | undefined;

/** The tracing of this process when `enabled` and `@opentelemetry/api` is installed, else undefined. */
export async function loadTracing(enabled: boolean): Promise<TaskTracing | undefined> {
  if (!enabled) return undefined;
  loaded ??= import('@opentelemetry/api').then(
    (api) => api,
    () => undefined,
  );
  const api = await loaded;
  return api ? new OtelTracing(api) : undefined;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A span nothing records and with no context to pass on. */
const NOT_LIVE: ProducerTrace = { live: false, end: () => undefined };

class OtelTracing implements TaskTracing {
  private readonly tracer: OtelApi.Tracer;
  /** The API's own no-op provider, the delegate of its proxy until an SDK registers one. */
  private readonly noopProvider: OtelApi.TracerProvider;

  constructor(private readonly api: typeof OtelApi) {
    this.tracer = api.trace.getTracer(MESSAGING_SYSTEM, PACKAGE_VERSION);
    this.noopProvider = new api.ProxyTracerProvider().getDelegate();
  }

  /**
   * Whether an SDK is registered (checked per call: one may register after the client was made). Without
   * one every span is a no-op, so a call with no context to join or pass on skips the span work.
   */
  private get sdkRegistered(): boolean {
    const provider = this.api.trace.getTracerProvider();
    return !(provider instanceof this.api.ProxyTracerProvider && provider.getDelegate() === this.noopProvider);
  }

  produce(operation: 'emit' | 'send', pattern: string, clientId: string, count: number): ProducerTrace {
    const { api } = this;
    if (!this.sdkRegistered && api.trace.getSpan(api.context.active()) === undefined) return NOT_LIVE;
    const span = this.tracer.startSpan(`send ${pattern}`, {
      kind: api.SpanKind.PRODUCER,
      attributes: {
        'messaging.system': MESSAGING_SYSTEM,
        'messaging.operation.type': 'send',
        'messaging.operation.name': operation,
        'messaging.destination.name': pattern,
        ...(typeof clientId === 'string' ? { 'nestjs_redis_tasks.client_id': clientId } : {}),
        ...(count > 1 ? { 'messaging.batch.message_count': count } : {}),
      },
    });
    const spanContext = span.spanContext();
    const context = api.isSpanContextValid(spanContext) ? toTraceContext(spanContext) : undefined;
    return {
      live: context !== undefined || span.isRecording(),
      context,
      end(ids, error) {
        if (ids?.length === 1) span.setAttribute('messaging.message.id', ids[0]);
        if (error !== undefined) failSpan(api, span, error);
        span.end();
      },
    };
  }

  consume(task: ConsumedTask): ConsumerTrace | undefined {
    const { api } = this;
    // No SDK and no parent to join: nothing would record the span or be passed on (see below).
    if (typeof task.traceparent !== 'string' && !this.sdkRegistered) return undefined;
    const parent = fromTraceContext(api, task.traceparent, task.tracestate);
    const span = this.tracer.startSpan(
      `process ${task.pattern}`,
      {
        kind: api.SpanKind.CONSUMER,
        attributes: {
          'messaging.system': MESSAGING_SYSTEM,
          'messaging.operation.type': 'process',
          'messaging.operation.name': 'process',
          'messaging.destination.name': task.pattern,
          'messaging.message.id': task.id,
          'messaging.consumer.group.name': task.group,
          'messaging.client.id': task.workerId,
          'nestjs_redis_tasks.client_id': task.clientId,
          'nestjs_redis_tasks.attempt': task.attempt,
        },
      },
      parent,
    );
    if (!span.isRecording() && parent === api.ROOT_CONTEXT) {
      span.end();
      return undefined;
    }
    const active = api.trace.setSpan(parent, span);
    return {
      within: (fn) => api.context.with(active, fn),
      event: (name, attributes) => span.addEvent(name, attributes),
      failed: (error) => failSpan(api, span, error),
      end: () => span.end(),
    };
  }
}

function toTraceContext(spanContext: OtelApi.SpanContext): TraceContext {
  const flags = (spanContext.traceFlags & 0xff).toString(16).padStart(2, '0');
  const traceparent = `00-${spanContext.traceId}-${spanContext.spanId}-${flags}`;
  const tracestate = spanContext.traceState?.serialize();
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/** The producer's context as the parent of a run; a missing or broken one starts a new trace (never fails a task). */
function fromTraceContext(api: typeof OtelApi, traceparent: unknown, tracestate: unknown): OtelApi.Context {
  const match = typeof traceparent === 'string' ? TRACEPARENT.exec(traceparent) : null;
  if (!match || match[1] === 'ff') return api.ROOT_CONTEXT;
  const spanContext: OtelApi.SpanContext = {
    traceId: match[2],
    spanId: match[3],
    traceFlags: Number.parseInt(match[4], 16),
    isRemote: true,
    ...(typeof tracestate === 'string' && tracestate !== '' ? { traceState: api.createTraceState(tracestate) } : {}),
  };
  return api.isSpanContextValid(spanContext)
    ? api.trace.setSpanContext(api.ROOT_CONTEXT, spanContext)
    : api.ROOT_CONTEXT;
}

function failSpan(api: typeof OtelApi, span: OtelApi.Span, error: unknown): void {
  try {
    if (error instanceof Error) span.recordException(error);
    else span.recordException({ name: 'Error', message: String(error) });
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : undefined });
  } catch {
    span.setStatus({ code: api.SpanStatusCode.ERROR }); // a hostile thrown value: the status at least
  }
}
