import type { INestMicroservice, Type } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { Test, type TestingModule } from '@nestjs/testing';
import { Registry } from 'prom-client';
import { REDIS_TASK_METRICS_OPTIONS, RedisTaskMetrics } from '../../lib/metrics.js';
import { RedisTaskHealthIndicator } from '../../lib/terminus.js';
import {
  RedisTaskClient,
  RedisTaskModule,
  RedisTaskTransport,
  type RedisTaskClientOptions,
  type RedisTaskTransportOptions,
} from '../../lib/index.js';
import { redisUrl } from './redis.js';

export interface Worker {
  readonly app: INestMicroservice;
  readonly transport: RedisTaskTransport;
  readonly module: TestingModule;
}

/** A worker microservice built with the Nest testing module, listening on a real Redis. */
export async function startWorker(
  prefix: string,
  controllers: Type[],
  options: RedisTaskTransportOptions = {},
  providers: unknown[] = [],
): Promise<Worker> {
  const module = await Test.createTestingModule({ controllers, providers: providers as never[] }).compile();
  const transport = new RedisTaskTransport({ connection: redisUrl(), prefix, ...options });
  const app = module.createNestMicroservice({ strategy: transport, logger: false });
  await app.listen();
  return { app, transport, module };
}

/** A producer: `RedisTaskModule.forRoot` in a testing module, returning the injected client. */
export async function startProducer(
  prefix: string,
  options: RedisTaskClientOptions = {},
): Promise<{ client: RedisTaskClient; module: TestingModule }> {
  const module = await Test.createTestingModule({
    imports: [RedisTaskModule.forRoot({ connection: redisUrl(), prefix, ...options })],
  }).compile();
  module.useLogger(false);
  await module.init();
  const client = module.get(RedisTaskClient);
  await client.connect();
  return { client, module };
}

/**
 * An app's operations module: `RedisTaskModule.forRoot` with the metrics (a registry of its own, stats read
 * on every scrape) and the Terminus health indicator, initialised.
 */
export async function startOpsModule(
  options: Parameters<typeof RedisTaskModule.forRoot>[0] & { prefix: string },
): Promise<TestingModule> {
  const module = await Test.createTestingModule({
    imports: [RedisTaskModule.forRoot({ connection: redisUrl(), ...options }), TerminusModule],
    providers: [
      RedisTaskMetrics,
      RedisTaskHealthIndicator,
      { provide: REDIS_TASK_METRICS_OPTIONS, useValue: { registry: new Registry(), statsTtlMs: 0 } },
    ],
  }).compile();
  module.useLogger(false);
  await module.init();
  return module;
}
