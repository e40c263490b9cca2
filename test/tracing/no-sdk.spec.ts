import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern } from '@nestjs/microservices';
import { context, SpanKind, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { firstValueFrom } from 'rxjs';
import { RedisTaskContext } from '../../lib/index.js';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { startProducer, startWorker } from '../support/nest.js';
import { deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

// The API installed without an SDK skips span work per task (the hot path), but only where nothing
// would be recorded or passed on: a context to propagate still travels, and an SDK registered after
// the client and worker started is used at once.
const redis = openRedis();
const contextManager = new AsyncLocalStorageContextManager();
const REMOTE = {
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  spanId: '00f067aa0ba902b7',
  traceFlags: TraceFlags.SAMPLED,
  isRemote: true,
};
const runs: { pattern: string; traceId?: string }[] = [];

@Controller()
class Seen {
  @EventPattern<string>('nosdk')
  seen(@Ctx() ctx: RedisTaskContext): void {
    runs.push({ pattern: ctx.getPattern(), traceId: trace.getActiveSpan()?.spanContext().traceId });
  }
}

let prefix = '';
const started: { close(): Promise<unknown> }[] = [];

beforeAll(() => {
  // A context manager but no tracer provider: the API's no-op tracer answers.
  context.setGlobalContextManager(contextManager.enable());
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  runs.length = 0;
  trace.disable();
});

afterAll(async () => {
  context.disable();
  await redis.quit();
});

describe('OpenTelemetry API without an SDK', () => {
  it('stores no trace context when there is none, and still passes on a context the caller has', async () => {
    prefix = testPrefix('otel-nosdk');
    const pending = new PrefixKeys(prefix).queue('nosdk').pending('default');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    await firstValueFrom(client.emit('nosdk', { n: 1 }));
    const remote = trace.setSpanContext(context.active(), REMOTE);
    await context.with(remote, () => firstValueFrom(client.emit('nosdk', { n: 2 })));
    const [plain, propagated] = await redis.lrange(pending, 0, -1);
    expect(plain).not.toContain('traceparent');
    expect(propagated).toContain(`"traceparent":"00-${REMOTE.traceId}-${REMOTE.spanId}-01"`);

    // The worker joins the carried context (the handler sees it active) and runs the other without one.
    started.push((await startWorker(prefix, [Seen])).app);
    await waitFor(() => runs.length === 2, 'both tasks ran');
    expect(runs.map((run) => run.traceId).sort()).toEqual([REMOTE.traceId, undefined].sort());
  });

  it('uses an SDK registered after the client and the worker started', async () => {
    prefix = testPrefix('otel-late');
    const { client, module } = await startProducer(prefix);
    started.push(module);
    started.push((await startWorker(prefix, [Seen])).app);
    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    await firstValueFrom(client.emit('nosdk', { n: 3 }));
    await waitFor(
      () => exporter.getFinishedSpans().some((span) => span.kind === SpanKind.CONSUMER),
      'the run span ended',
    );
    const spans = exporter.getFinishedSpans();
    const producer = spans.find((span) => span.kind === SpanKind.PRODUCER);
    const consumer = spans.find((span) => span.kind === SpanKind.CONSUMER);
    expect(producer?.name).toBe('send nosdk');
    expect(consumer?.spanContext().traceId).toBe(producer?.spanContext().traceId);
    expect(runs).toEqual([{ pattern: 'nosdk', traceId: producer?.spanContext().traceId }]);
  });
});
