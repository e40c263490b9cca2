import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { firstValueFrom } from 'rxjs';
import { RedisTaskAdmin, RedisTaskContext } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';

const run = promisify(execFile);
const PRODUCER = fileURLToPath(new URL('../../.chaos-build/test/tracing/fixtures/traced-producer.js', import.meta.url));
const redis = openRedis();
const exporter = new InMemorySpanExporter();
const contextManager = new AsyncLocalStorageContextManager();
/** The span each handler run saw as active: its own code's spans are children of the run's span. */
const activeInHandler: { pattern: string; spanId?: string; attempt: number }[] = [];
let healed = false;

function seen(pattern: string, ctx: RedisTaskContext): void {
  activeInHandler.push({ pattern, spanId: trace.getActiveSpan()?.spanContext().spanId, attempt: ctx.getAttempt() });
}

@Controller()
class Traced {
  @EventPattern<string>('traced')
  traced(@Ctx() ctx: RedisTaskContext): void {
    seen('traced', ctx);
  }

  @EventPattern<string>('traced.batch')
  batch(@Ctx() ctx: RedisTaskContext): void {
    seen('traced.batch', ctx);
  }

  @EventPattern<string>('traced.fails', { maxAttempts: 2, backoff: { type: 'fixed', delayMs: 10 } })
  fails(@Ctx() ctx: RedisTaskContext): void {
    seen('traced.fails', ctx);
    if (!healed) throw new RangeError('the warehouse is closed');
  }

  @MessagePattern('traced.quote')
  quote(@Payload() p: { n: number }, @Ctx() ctx: RedisTaskContext): { quote: number } {
    seen('traced.quote', ctx);
    return { quote: p.n * 10 };
  }
}

interface PrintedSpan {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: Record<string, unknown>;
  status: number;
}

let prefix = '';
const started: { close(): Promise<unknown> }[] = [];

beforeAll(() => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  context.setGlobalContextManager(contextManager.enable());
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  exporter.reset();
  activeInHandler.length = 0;
  healed = false;
});

afterAll(async () => {
  trace.disable();
  context.disable();
  await redis.quit();
});

function consumerSpans(pattern: string): ReadableSpan[] {
  return exporter
    .getFinishedSpans()
    .filter((span) => span.kind === SpanKind.CONSUMER && span.attributes['messaging.destination.name'] === pattern);
}

describe('OpenTelemetry', () => {
  it('joins producer and handler in one trace across processes, through retries and a dead-letter requeue', async () => {
    prefix = testPrefix('otel');
    const worker = await startWorker(prefix, [Traced]);
    started.push(worker.app);
    const { module } = await startProducer(prefix, { tracing: false });
    started.push(module);
    const admin = module.get(RedisTaskAdmin);

    // The producer is another process, with its own tracer provider and exporter.
    const { stdout } = await run(process.execPath, [PRODUCER], {
      env: { ...process.env, REDIS_URL: redisUrl(), PREFIX: prefix },
    });
    const printed = JSON.parse(stdout.trim().split('\n').pop() as string) as {
      ids: { emitted: string; failing: string; quote: { quote: number }; batch: string[] };
      spans: PrintedSpan[];
    };
    const { ids, spans } = printed;
    expect(ids.quote).toEqual({ quote: 30 });
    const request = spans.find((span) => span.name === 'GET /orders') as PrintedSpan;
    const producers = spans.filter((span) => span.kind === SpanKind.PRODUCER);
    expect(producers.map((span) => [span.name, span.attributes['messaging.operation.name']])).toEqual([
      ['send traced', 'emit'],
      ['send traced.fails', 'emit'],
      ['send traced.quote', 'send'],
      ['send traced.batch', 'emit'],
    ]);
    for (const span of producers) {
      expect(span.parentSpanId).toBe(request.spanId);
      expect(span.traceId).toBe(request.traceId);
      expect(span.attributes).toMatchObject({
        'messaging.system': 'nestjs-redis-tasks',
        'messaging.operation.type': 'send',
        'nestjs_redis_tasks.client_id': 'default',
      });
    }
    const producerOf = (pattern: string) =>
      producers.find((span) => span.attributes['messaging.destination.name'] === pattern) as PrintedSpan;
    expect(producerOf('traced').attributes['messaging.message.id']).toBe(ids.emitted);
    expect(producerOf('traced.batch').attributes['messaging.batch.message_count']).toBe(2);

    // The worker's spans: CONSUMER, children of the producer's span in the other process.
    await waitFor(
      () => consumerSpans('traced.fails').length === 2 && consumerSpans('traced.batch').length === 2,
      'the runs to end',
    );
    const [handled] = consumerSpans('traced');
    expect(handled.name).toBe('process traced');
    expect(handled.spanContext().traceId).toBe(request.traceId);
    expect(handled.parentSpanContext?.spanId).toBe(producerOf('traced').spanId);
    expect(handled.attributes).toMatchObject({
      'messaging.system': 'nestjs-redis-tasks',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'traced',
      'messaging.message.id': ids.emitted,
      'messaging.consumer.group.name': 'default',
      'messaging.client.id': worker.transport.options.workerId,
      'nestjs_redis_tasks.client_id': 'default',
      'nestjs_redis_tasks.attempt': 1,
    });
    // The tracer names the library and its version (the package's), as instrumentation scopes should.
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
    expect(handled.instrumentationScope).toEqual({ name: 'nestjs-redis-tasks', version, schemaUrl: undefined });
    // The handler's own code ran inside the run's span.
    expect(activeInHandler.find((entry) => entry.pattern === 'traced')?.spanId).toBe(handled.spanContext().spanId);
    expect(consumerSpans('traced.quote')[0].parentSpanContext?.spanId).toBe(producerOf('traced.quote').spanId);
    for (const span of consumerSpans('traced.batch'))
      expect(span.parentSpanContext?.spanId).toBe(producerOf('traced.batch').spanId);

    // A failed run: exception and error status; retry scheduled, then dead-lettered; both runs in the trace.
    const [first, second] = consumerSpans('traced.fails');
    expect(first.status.code).toBe(SpanStatusCode.ERROR);
    expect(first.events.map((event) => event.name)).toEqual(['exception', 'retry scheduled']);
    expect(second.events.map((event) => event.name)).toEqual(['exception', 'dead-lettered']);
    expect(second.attributes['nestjs_redis_tasks.attempt']).toBe(2);
    for (const span of [first, second]) expect(span.parentSpanContext?.spanId).toBe(producerOf('traced.fails').spanId);

    // Requeued from dead letters, the task stays in its trace.
    healed = true;
    expect(await admin.requeueDeadLetters('traced.fails', { ids: [ids.failing] })).toEqual({ requeued: 1, skipped: 0 });
    await waitFor(() => consumerSpans('traced.fails').length === 3, 'the requeued run');
    const third = consumerSpans('traced.fails')[2];
    expect(third.status.code).toBe(SpanStatusCode.UNSET);
    expect(third.parentSpanContext?.spanId).toBe(producerOf('traced.fails').spanId);
    expect(third.spanContext().traceId).toBe(request.traceId);
  });

  it('stores no trace context with tracing: false, and one with tracing on', async () => {
    prefix = testPrefix('otel-off');
    const keys = new PrefixKeys(prefix).queue('untraced');
    for (const tracing of [false, true]) {
      const { client, module } = await startProducer(prefix, { tracing });
      started.push(module);
      const span = trace.getTracer('test').startSpan('request');
      await context.with(trace.setSpan(context.active(), span), () =>
        firstValueFrom(client.emit('untraced', { tracing })),
      );
      span.end();
    }
    const [off, on] = await redis.lrange(keys.pending('default'), 0, -1);
    expect(off).not.toContain('traceparent');
    expect(on).toMatch(/"traceparent":"00-[0-9a-f]{32}-[0-9a-f]{16}-01"/);
  });
});
