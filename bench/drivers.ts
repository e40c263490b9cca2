import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Queue, Worker } from 'bullmq';
import { Cluster } from 'ioredis';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient, RedisTaskRecordBuilder, RedisTaskTransport } from '../lib/index.js';

/** What the benchmark does to a queue library; both drivers run in this one process. */
export interface Driver {
  readonly name: string;
  /** Starts a fresh, empty queue for the next phase. */
  begin(phase: string): Promise<void>;
  /** One awaited enqueue. */
  enqueue(data: BenchTask, clientId?: string): Promise<void>;
  /** One awaited request/reply (send()), where the library has one. */
  request?(data: BenchTask): Promise<void>;
  /** One batch call (emitBatch / addBulk). */
  enqueueBatch(items: BenchTask[], clientId?: string | ((index: number) => string)): Promise<void>;
  startWorker(concurrency: number, handler: (data: BenchTask) => void): Promise<void>;
  stopWorker(): Promise<void>;
  /** Key pattern of the current phase's keys (for memory figures and clean-up). */
  readonly keyPattern: string;
  close(): Promise<void>;
}

export interface BenchTask {
  readonly i: number;
  /** performance.now() at enqueue (same process). */
  readonly t: number;
  /** Filler making the payload about 1 KB or 16 KB (the payload rows); absent elsewhere. */
  readonly pad?: string;
}

let onTask: (data: BenchTask) => void = () => undefined;

@Controller()
class BenchHandler {
  @EventPattern<string>('bench.task')
  handle(@Payload() data: BenchTask): void {
    onTask(data);
  }

  @MessagePattern<string>('bench.rpc')
  reply(@Payload() data: BenchTask): BenchTask {
    return data;
  }
}

@Module({ controllers: [BenchHandler] })
class BenchWorkerModule {}

/** nestjs-redis-tasks through the Nest transport (worker) and RedisTaskClient (producer). */
export class OursDriver implements Driver {
  readonly name = 'nestjs-redis-tasks';
  private prefix = '';
  private client: RedisTaskClient | undefined;
  private readonly apps: INestMicroservice[] = [];

  constructor(
    private readonly url: string,
    private readonly workerOptions: { prefetch?: (concurrency: number) => number; reaperIntervalMs?: number } = {},
    /** Whether every task is tracked (the client's `track` option). */
    private readonly track = false,
    /** A Redis Cluster's nodes and the shard count of the queue, instead of `url` (the per-node rows). */
    private readonly cluster?: { readonly nodes: readonly { host: string; port: number }[]; readonly shards: number },
  ) {}

  /** The connection and shard options of the client and the transport. */
  private get connectionOptions() {
    return this.cluster
      ? { connection: { nodes: this.cluster.nodes.map((node) => ({ ...node })) }, shards: this.cluster.shards }
      : { connection: this.url };
  }

  get keyPattern(): string {
    return `${this.prefix}:*`;
  }

  async begin(phase: string): Promise<void> {
    await this.client?.close();
    this.prefix = `rt${randomBytes(3).toString('hex')}-${phase}`;
    this.client = new RedisTaskClient({ ...this.connectionOptions, prefix: this.prefix, track: this.track });
    await this.client.connect();
  }

  async enqueue(data: BenchTask, clientId?: string): Promise<void> {
    const payload = clientId ? new RedisTaskRecordBuilder(data).setClientId(clientId).build() : data;
    await firstValueFrom(this.requireClient().emit('bench.task', payload));
  }

  async request(data: BenchTask): Promise<void> {
    await firstValueFrom(this.requireClient().send('bench.rpc', data));
  }

  async enqueueBatch(items: BenchTask[], clientId?: string | ((index: number) => string)): Promise<void> {
    const records =
      clientId === undefined
        ? items
        : items.map((item, index) =>
            new RedisTaskRecordBuilder(item)
              .setClientId(typeof clientId === 'string' ? clientId : clientId(index))
              .build(),
          );
    await this.requireClient().emitBatch('bench.task', records);
  }

  /** A batch of this phase's client (see bench/batches.ts). */
  batch(options: Parameters<RedisTaskClient['batch']>[0]): ReturnType<RedisTaskClient['batch']> {
    return this.requireClient().batch(options);
  }

  /** A flow of this phase's client (see bench/flows.ts). */
  flow(options: Parameters<RedisTaskClient['flow']>[0]): ReturnType<RedisTaskClient['flow']> {
    return this.requireClient().flow(options);
  }

  /** One emitBatch call of payloads or records as they are. */
  async emitRecords(records: unknown[]): Promise<void> {
    await this.requireClient().emitBatch('bench.task', records);
  }

  async startWorker(concurrency: number, handler: (data: BenchTask) => void): Promise<void> {
    await this.startGroupWorkers(['default'], concurrency, handler);
  }

  /** One worker per consumer group (each gets a copy of every task emitted after it started once). */
  async startGroupWorkers(
    groups: readonly string[],
    concurrency: number,
    handler: (data: BenchTask) => void,
  ): Promise<void> {
    onTask = handler;
    for (const group of groups) {
      const app = await NestFactory.createMicroservice(BenchWorkerModule, {
        strategy: new RedisTaskTransport({
          ...this.connectionOptions,
          prefix: this.prefix,
          concurrency,
          group,
          ...(this.workerOptions.prefetch ? { prefetch: this.workerOptions.prefetch(concurrency) } : {}),
          ...(this.workerOptions.reaperIntervalMs ? { reaperIntervalMs: this.workerOptions.reaperIntervalMs } : {}),
        }),
        logger: ['error'],
      });
      await app.listen();
      this.apps.push(app);
    }
  }

  async stopWorker(): Promise<void> {
    await Promise.all(this.apps.splice(0).map((app) => app.close()));
  }

  async close(): Promise<void> {
    await this.stopWorker();
    await this.client?.close();
  }

  private requireClient(): RedisTaskClient {
    if (!this.client) throw new Error('begin() first');
    return this.client;
  }
}

/** BullMQ: Queue.add / addBulk and a Worker, completed jobs removed (removeOnComplete). */
export class BullMqDriver implements Driver {
  readonly name = 'BullMQ';
  /** On a Cluster, in a hash tag (BullMQ's documented way: every key of the queue in one slot). */
  private readonly prefix: string;
  private queueName = '';
  private queue: Queue | undefined;
  private worker: Worker | undefined;
  private readonly clusters: Cluster[] = [];

  constructor(
    private readonly url: string,
    /** A Redis Cluster's nodes instead of `url` (the per-node rows). */
    private readonly nodes?: readonly { host: string; port: number }[],
  ) {
    const prefix = `bl${randomBytes(3).toString('hex')}`;
    this.prefix = nodes ? `{${prefix}}` : prefix;
  }

  private get connection() {
    if (this.nodes) {
      const cluster = new Cluster(
        this.nodes.map((node) => ({ ...node })),
        { redisOptions: { maxRetriesPerRequest: null } },
      );
      this.clusters.push(cluster);
      return cluster;
    }
    const url = new URL(this.url);
    return { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
  }

  get keyPattern(): string {
    return `${this.prefix}:${this.queueName}:*`;
  }

  async begin(phase: string): Promise<void> {
    await this.queue?.close();
    this.queueName = `${phase}-${randomBytes(3).toString('hex')}`;
    this.queue = new Queue(this.queueName, { connection: this.connection, prefix: this.prefix });
    await this.queue.waitUntilReady();
  }

  async enqueue(data: BenchTask): Promise<void> {
    await this.requireQueue().add('bench.task', data, { removeOnComplete: true, removeOnFail: true });
  }

  async enqueueBatch(items: BenchTask[]): Promise<void> {
    await this.requireQueue().addBulk(
      items.map((data) => ({ name: 'bench.task', data, opts: { removeOnComplete: true, removeOnFail: true } })),
    );
  }

  async startWorker(concurrency: number, handler: (data: BenchTask) => void): Promise<void> {
    this.worker = new Worker(
      this.queueName,
      async (job) => {
        handler(job.data as BenchTask);
      },
      { connection: this.connection, prefix: this.prefix, concurrency, removeOnComplete: { count: 0 } },
    );
    await this.worker.waitUntilReady();
  }

  async stopWorker(): Promise<void> {
    await this.worker?.close();
    this.worker = undefined;
  }

  async close(): Promise<void> {
    await this.stopWorker();
    await this.queue?.close();
    for (const cluster of this.clusters.splice(0)) cluster.disconnect();
  }

  private requireQueue(): Queue {
    if (!this.queue) throw new Error('begin() first');
    return this.queue;
  }
}
