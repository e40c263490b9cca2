import 'reflect-metadata';
import { Controller, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern } from '@nestjs/microservices';
import { RedisTaskTransport } from '../lib/index.js';
import { startAnchorWorkers } from './anchor-workers.js';

/**
 * One idle worker process of the idle rows (bench/idle.ts), each library as its documentation sets it up:
 * ours a Nest microservice with RedisTaskTransport and one handler per pattern, default options; BullMQ one
 * `Worker` per queue sharing one connection; Bee-Queue one worker `Queue` per queue. Says `ready` once
 * listening, closes on `stop`.
 */
const url = process.env.BENCH_IDLE_URL ?? 'redis://127.0.0.1:6379';
const prefix = process.env.BENCH_IDLE_PREFIX ?? 'tasks';
const patterns = Number(process.env.BENCH_IDLE_PATTERNS ?? '1');
const library = process.env.BENCH_IDLE_LIBRARY ?? 'ours';
const names = Array.from({ length: patterns }, (_, n) => `idle.p${n}`);

async function startOurs(): Promise<() => Promise<unknown>> {
  @Controller()
  class Handlers {}
  for (const [n, name] of names.entries()) {
    const key = `h${n}`;
    Object.defineProperty(Handlers.prototype, key, { value: () => undefined, writable: true, configurable: true });
    EventPattern(name)(Handlers.prototype, key, Object.getOwnPropertyDescriptor(Handlers.prototype, key)!);
  }
  @Module({ controllers: [Handlers as Type] })
  class IdleModule {}
  const app = await NestFactory.createMicroservice(IdleModule, {
    strategy: new RedisTaskTransport({ connection: url, prefix }),
    logger: false,
  });
  await app.listen();
  return () => app.close();
}

const close = await (library === 'bull'
  ? startAnchorWorkers('BullMQ', url, prefix, names)
  : library === 'bee'
    ? startAnchorWorkers('Bee-Queue', url, prefix, names)
    : startOurs());
process.send?.('ready');
process.on('message', (message) => {
  // Its CPU so far (µs, user and system), for the claim rows' CPU per task of the whole deployment.
  if (message === 'cpu') {
    const { user, system } = process.cpuUsage();
    process.send?.({ cpu: user + system });
  }
  if (message !== 'stop') return;
  void close().then(() => process.exit(0));
});
