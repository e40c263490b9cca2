import 'reflect-metadata';
import { Controller, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern } from '@nestjs/microservices';
import { RedisTaskTransport } from '../lib/index.js';

/**
 * One idle worker process of the idle rows (bench/idle.ts): a Nest microservice with RedisTaskTransport
 * and one handler per pattern, default options. Says `ready` once listening, closes on `stop`.
 */
const url = process.env.BENCH_IDLE_URL ?? 'redis://127.0.0.1:6379';
const prefix = process.env.BENCH_IDLE_PREFIX ?? 'tasks';
const patterns = Number(process.env.BENCH_IDLE_PATTERNS ?? '1');

@Controller()
class Handlers {}
for (let n = 0; n < patterns; n++) {
  const key = `h${n}`;
  Object.defineProperty(Handlers.prototype, key, { value: () => undefined, writable: true, configurable: true });
  EventPattern(`idle.p${n}`)(Handlers.prototype, key, Object.getOwnPropertyDescriptor(Handlers.prototype, key)!);
}

@Module({ controllers: [Handlers as Type] })
class IdleModule {}

const app = await NestFactory.createMicroservice(IdleModule, {
  strategy: new RedisTaskTransport({ connection: url, prefix }),
  logger: false,
});
await app.listen();
process.send?.('ready');
process.on('message', (message) => {
  if (message !== 'stop') return;
  void app.close().then(() => process.exit(0));
});
