import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  EventPattern,
  MessagePattern,
  Payload,
  Transport,
  type ClientProxy,
} from '@nestjs/microservices';
import BeeQueue from 'bee-queue';
import { Redis } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import type { BenchTask, Driver } from './drivers.js';

/**
 * Bee-Queue 2.0: the fastest simple Redis queue in Node. A producer queue (no worker, no events) and a
 * worker queue, jobs removed on success; `storeJobs: false` so the producer keeps no job objects.
 */
export class BeeQueueDriver implements Driver {
  readonly name = 'Bee-Queue';
  private readonly prefix = `bq${randomBytes(3).toString('hex')}`;
  private queueName = '';
  private producer: BeeQueue<BenchTask> | undefined;
  private worker: BeeQueue<BenchTask> | undefined;

  constructor(private readonly url: string) {}

  private settings(isWorker: boolean): BeeQueue.QueueSettings {
    const url = new URL(this.url);
    return {
      prefix: this.prefix,
      redis: { host: url.hostname, port: Number(url.port || 6379) },
      isWorker,
      getEvents: false,
      sendEvents: false,
      storeJobs: false,
      removeOnSuccess: true,
      removeOnFailure: true,
      activateDelayedJobs: false,
    };
  }

  get keyPattern(): string {
    return `${this.prefix}:${this.queueName}:*`;
  }

  async begin(phase: string): Promise<void> {
    await this.producer?.close();
    this.queueName = `${phase}-${randomBytes(3).toString('hex')}`;
    this.producer = new BeeQueue<BenchTask>(this.queueName, this.settings(false));
    await this.producer.ready();
  }

  async enqueue(data: BenchTask): Promise<void> {
    await this.requireProducer().createJob(data).save();
  }

  async enqueueBatch(items: BenchTask[]): Promise<void> {
    const producer = this.requireProducer();
    const errors = await producer.saveAll(items.map((item) => producer.createJob(item)));
    if (errors.size > 0) throw [...errors.values()][0];
  }

  async startWorker(concurrency: number, handler: (data: BenchTask) => void): Promise<void> {
    this.worker = new BeeQueue<BenchTask>(this.queueName, this.settings(true));
    await this.worker.ready();
    this.worker.process(concurrency, async (job) => {
      handler(job.data);
    });
  }

  async stopWorker(): Promise<void> {
    await this.worker?.close();
    this.worker = undefined;
  }

  async close(): Promise<void> {
    await this.stopWorker();
    await this.producer?.close();
  }

  private requireProducer(): BeeQueue<BenchTask> {
    if (!this.producer) throw new Error('begin() first');
    return this.producer;
  }
}

let onNestRedisTask: (data: BenchTask) => void = () => undefined;

@Controller()
class NestRedisHandler {
  @EventPattern('bench.task')
  handle(@Payload() data: BenchTask): void {
    onNestRedisTask(data);
  }

  @MessagePattern('bench.rpc')
  reply(@Payload() data: BenchTask): BenchTask {
    return data;
  }
}

@Module({ controllers: [NestRedisHandler] })
class NestRedisModule {}

/**
 * Nest's own `Transport.REDIS`: pub/sub, so an emit with no server subscribed is lost, and there is no
 * backlog to drain. Used for the emit, send() and latency rows only.
 */
export class NestRedisDriver implements Driver {
  readonly name = 'Nest Transport.REDIS';
  readonly keyPattern = 'nest-redis-has-no-keys:*';
  private client: ClientProxy | undefined;
  private app: INestMicroservice | undefined;

  constructor(private readonly url: string) {}

  private get options() {
    const url = new URL(this.url);
    return { host: url.hostname, port: Number(url.port || 6379) };
  }

  async begin(): Promise<void> {
    if (this.client) return;
    this.client = ClientProxyFactory.create({ transport: Transport.REDIS, options: this.options });
    await this.client.connect();
  }

  async enqueue(data: BenchTask): Promise<void> {
    await firstValueFrom(this.requireClient().emit('bench.task', data));
  }

  async request(data: BenchTask): Promise<void> {
    await firstValueFrom(this.requireClient().send('bench.rpc', data));
  }

  enqueueBatch(): Promise<void> {
    return Promise.reject(new Error('Nest Transport.REDIS has no batch call'));
  }

  async startWorker(_concurrency: number, handler: (data: BenchTask) => void): Promise<void> {
    onNestRedisTask = handler;
    this.app = await NestFactory.createMicroservice(NestRedisModule, {
      transport: Transport.REDIS,
      options: this.options,
      logger: ['error'],
    });
    await this.app.listen();
  }

  async stopWorker(): Promise<void> {
    await this.app?.close();
    this.app = undefined;
  }

  async close(): Promise<void> {
    await this.stopWorker();
    await this.client?.close();
    this.client = undefined;
  }

  private requireClient(): ClientProxy {
    if (!this.client) throw new Error('begin() first');
    return this.client;
  }
}

/**
 * The physical floor of the latency rows: no queue library, two bare ioredis connections, an RPUSH
 * of the task to one list and a worker blocked in BLPOP on it (the least any Redis queue needs: one
 * round trip to enqueue, one blocked pop woken). Run beside each library on the same schedule, it
 * shows how much of a p99 is this machine's (timers, scheduling, the loopback) and how much is ours.
 */
export class BareHandoffDriver implements Pick<
  Driver,
  'name' | 'begin' | 'enqueue' | 'startWorker' | 'stopWorker' | 'keyPattern' | 'close'
> {
  readonly name = 'bare ioredis RPUSH → BLPOP';
  private readonly producer: Redis;
  private list = '';
  private consumer: Redis | undefined;
  private consuming: Promise<void> | undefined;

  constructor(private readonly url: string) {
    this.producer = new Redis(url);
  }

  get keyPattern(): string {
    return `${this.list}*`;
  }

  begin(phase: string): Promise<void> {
    this.list = `floor${randomBytes(3).toString('hex')}-${phase}`;
    return Promise.resolve();
  }

  async enqueue(data: BenchTask): Promise<void> {
    await this.producer.rpush(this.list, JSON.stringify(data));
  }

  async startWorker(_concurrency: number, handler: (data: BenchTask) => void): Promise<void> {
    const consumer = (this.consumer = new Redis(this.url));
    await consumer.ping();
    const list = this.list;
    this.consuming = (async () => {
      for (;;) {
        const popped = await consumer.blpop(list, 0).catch(() => null);
        if (!popped) return; // disconnected by stopWorker()
        handler(JSON.parse(popped[1]) as BenchTask);
      }
    })();
  }

  async stopWorker(): Promise<void> {
    this.consumer?.disconnect();
    await this.consuming;
    this.consumer = undefined;
  }

  async close(): Promise<void> {
    await this.stopWorker();
    this.producer.disconnect();
  }
}
