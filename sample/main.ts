import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { RedisTaskTransport } from '../lib/index.js';
import { apiModule, ProfileService } from './api.module.js';
import { Progress } from './progress.js';
import { WorkerModule } from './worker.module.js';

/**
 * The sample: a producer emits avatar tasks while no worker runs yet (they wait in Redis), then a
 * worker microservice starts and handles them. Tenant "acme" floods 12 tasks, tenant "globex" adds 3:
 * the worker alternates between them instead of draining acme first. Last, a send() returns a
 * handler's result. Run it with `npm run sample`.
 */
async function main(): Promise<void> {
  const connection = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const logger = new Logger('Sample');

  const api = await NestFactory.createApplicationContext(apiModule(connection), { logger: ['log', 'warn', 'error'] });
  const profiles = api.get(ProfileService);
  logger.log('no worker is running yet: tasks wait in Redis, nothing is lost');
  await profiles.bulkUpload(
    'acme',
    Array.from({ length: 12 }, (_, i) => 1000 + i),
  );
  await profiles.upload('globex', 1);
  await profiles.upload('globex', 2);
  await profiles.upload('globex', 3);

  const worker = await NestFactory.createMicroservice(WorkerModule, {
    strategy: new RedisTaskTransport({ connection, prefix: 'sample', concurrency: 2, prefetch: 1 }),
    logger: ['log', 'warn', 'error'],
  });
  await worker.listen();
  logger.log('worker started: watch acme and globex take turns');

  await worker.get(Progress).whenHandled(15);
  const invoice = await profiles.renderInvoice('2026-0042');
  logger.log(`invoice rendered by the worker: ${invoice.url}`);

  await api.close();
  await worker.close();
  logger.log('done: every task was handled exactly once; the worker shut down cleanly');
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
