import { afterAll, afterEach, describe, expect, it } from '@jest/globals';
import { Controller, type Type } from '@nestjs/common';
import { EventPattern } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { RedisTaskRecordBuilder } from '../../lib/index.js';
import { startProducer, startWorker } from '../support/nest.js';
import { clientList, deleteKeys, openRedis, testPrefix, waitFor } from '../support/redis.js';

// A worker process holds the same connections whatever its number of patterns: its command connection, one
// subscriber (due times, resumes, and the wake messages of idle queue shards) and one blocking connection
// (lent to one idle loop at a time). It used to hold one blocking connection per pattern shard (102
// connections for 100 patterns).

const redis = openRedis();
const started: { close(): Promise<unknown> }[] = [];
let prefix = '';
const ran: string[] = [];

/** A controller with an @EventPattern handler for each of `count` patterns, `p0` to `p<count-1>`. */
function controllerOf(count: number): Type {
  @Controller()
  class Handlers {}
  for (let n = 0; n < count; n++) {
    const key = `p${n}`;
    Object.defineProperty(Handlers.prototype, key, {
      value: function handle(): void {
        ran.push(key);
      },
      writable: true,
      configurable: true,
    });
    EventPattern(key)(Handlers.prototype, key, Object.getOwnPropertyDescriptor(Handlers.prototype, key)!);
  }
  return Handlers;
}

/** The connections a worker of this id holds, by name. */
async function connectionNames(workerId: string): Promise<string[]> {
  return (await clientList(redis))
    .map((client) => client.name)
    .filter((name) => name.startsWith(`tasks:worker:${workerId}`))
    .sort();
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((app) => app.close()));
  await deleteKeys(redis, prefix);
  ran.length = 0;
});

afterAll(async () => {
  await redis.quit();
});

describe('connections per worker process', () => {
  it.each([[1], [20], [100]])(
    'holds three connections with %i pattern(s), and every idle pattern wakes at its first task',
    async (patterns) => {
      prefix = testPrefix(`conns-${patterns}`);
      const { client, module } = await startProducer(prefix);
      started.push(module);
      // A backstop far longer than the test: every task must be claimed because its wake message came.
      const { app, transport } = await startWorker(prefix, [controllerOf(patterns)], { blockTimeoutMs: 300_000 });
      started.push(app);
      const { workerId } = transport.options;
      const names = [`tasks:worker:${workerId}`, `tasks:worker:${workerId}:due`, `tasks:worker:${workerId}:wait`];
      // The blocking connection is opened when the loops start; it may still be connecting.
      await waitFor(async () => (await connectionNames(workerId)).length >= names.length, 'its connections');
      expect(await connectionNames(workerId)).toEqual(names);
      for (let n = 0; n < patterns; n++) {
        await firstValueFrom(client.emit(`p${n}`, new RedisTaskRecordBuilder({ n }).build()));
      }
      await waitFor(() => ran.length === patterns, `the ${patterns} tasks to run`, { timeoutMs: 20_000 });
      expect(new Set(ran).size).toBe(patterns);
      expect(await connectionNames(workerId)).toEqual(names);
    },
  );
});
