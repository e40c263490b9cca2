import BeeQueue from 'bee-queue';
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';

/**
 * Idle workers of an anchor as its documentation sets them up, one per queue name, each calling a no-op
 * handler: BullMQ one `Worker` per queue sharing one connection (each worker adds its blocking one), Bee-Queue
 * one worker `Queue` per queue. Resolves once they are ready, with how to close them. The connection and the
 * idle rows start them alike.
 */
export async function startAnchorWorkers(
  library: 'BullMQ' | 'Bee-Queue',
  url: string,
  prefix: string,
  names: readonly string[],
): Promise<() => Promise<unknown>> {
  if (library === 'BullMQ') {
    const connection = new Redis(url, { maxRetriesPerRequest: null });
    const workers = names.map((name) => new Worker(name, () => Promise.resolve(), { connection, prefix }));
    await Promise.all(workers.map((worker) => worker.waitUntilReady()));
    return async () => {
      await Promise.all(workers.map((worker) => worker.close()));
      connection.disconnect();
    };
  }
  const { hostname, port } = new URL(url);
  const redis = { host: hostname, port: Number(port || 6379) };
  const queues = names.map((name) => new BeeQueue(name, { prefix, redis, getEvents: false, sendEvents: false }));
  for (const queue of queues) queue.process(() => Promise.resolve());
  await Promise.all(queues.map((queue) => queue.ready()));
  return () => Promise.all(queues.map((queue) => queue.close()));
}
