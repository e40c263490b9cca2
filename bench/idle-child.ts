import 'reflect-metadata';
import { Controller, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern } from '@nestjs/microservices';
import BeeQueue from 'bee-queue';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { RedisTaskTransport } from '../lib/index.js';

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

async function startBull(): Promise<() => Promise<unknown>> {
  const connection = new Redis(url, { maxRetriesPerRequest: null });
  const workers = names.map((name) => new Worker(name, () => Promise.resolve(), { connection, prefix }));
  await Promise.all(workers.map((worker) => worker.waitUntilReady()));
  return async () => {
    await Promise.all(workers.map((worker) => worker.close()));
    connection.disconnect();
  };
}

async function startBee(): Promise<() => Promise<unknown>> {
  const { hostname, port } = new URL(url);
  const redis = { host: hostname, port: Number(port || 6379) };
  const queues = names.map((name) => new BeeQueue(name, { prefix, redis, getEvents: false, sendEvents: false }));
  for (const queue of queues) queue.process(() => Promise.resolve());
  await Promise.all(queues.map((queue) => queue.ready()));
  return () => Promise.all(queues.map((queue) => queue.close()));
}

const close = await (library === 'bull' ? startBull() : library === 'bee' ? startBee() : startOurs());
process.send?.('ready');
process.on('message', (message) => {
  if (message !== 'stop') return;
  void close().then(() => process.exit(0));
});
