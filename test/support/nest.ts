import type { INestMicroservice, Type } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
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
