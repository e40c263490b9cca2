import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { Controller, Module, type INestMicroservice, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Transport } from '@nestjs/microservices';
import { Redis } from 'ioredis';
import { RedisTaskTransport } from '../lib/index.js';
import { startAnchorWorkers } from './anchor-workers.js';

/** The pattern (queue) counts of the rows. */
const PATTERNS = [1, 20, 100] as const;
const LIBRARIES = ['nestjs-redis-tasks', 'BullMQ', 'Bee-Queue', 'Nest Transport.REDIS'] as const;
type Library = (typeof LIBRARIES)[number];

export const CONNECTIONS_INTRO = [
  '## Connections per worker process',
  '',
  'Redis connections one worker process holds when it consumes N patterns (queues), counted with `CLIENT LIST`',
  'once the worker is ready and idle (the count before it started taken off). Each library as its documentation',
  'sets it up: BullMQ one `Worker` per queue sharing one ioredis connection (each worker adds its blocking',
  "connection); Bee-Queue one worker `Queue` per queue; Nest's `Transport.REDIS` and ours one microservice with N",
  'handlers. Ours: the command connection, one subscriber (due times, resumes, wake messages) and one blocking',
  'connection lent to one idle loop at a time (ARCHITECTURE.md, "Waking idle workers"); before this change,',
  'one blocking connection per pattern shard (3, 22 and 102).',
];

/**
 * The wake-up latency of the change that made the count constant, before and after: measured once, the two
 * builds back to back (the build before it is not in this tree, so a run cannot measure it again).
 */
export const CONNECTIONS_LATENCY = [
  'Wake-up latency before and after (the latency rows of `npm run bench`, ours alone, concurrency 1, 2,000',
  'tasks/s, 3 runs each, median (min–max), the two builds one after the other on this machine, 2026-11-26):',
  'before (a blocking connection per pattern) p50 0.46 ms (0.41–0.48), p99 1.94 ms (1.39–2.19); after p50 0.50 ms',
  '(0.47–0.53), p99 1.94 ms (1.94–2.99). The spreads overlap; a loop woken by its message rather than on the',
  'blocking connection pays one claim round trip more (see ARCHITECTURE.md). Measured once, when the change',
  "was made; the latency rows above are this run's.",
];

/** A controller with an @EventPattern handler for each of `count` patterns. */
function handlersFor(count: number, prefix: string): Type {
  @Controller()
  class Handlers {}
  for (let n = 0; n < count; n++) {
    const key = `h${n}`;
    Object.defineProperty(Handlers.prototype, key, { value: () => undefined, writable: true, configurable: true });
    EventPattern(`${prefix}.p${n}`)(Handlers.prototype, key, Object.getOwnPropertyDescriptor(Handlers.prototype, key)!);
  }
  return Handlers;
}

function moduleWith(controller: Type): Type {
  @Module({ controllers: [controller] })
  class ConnectionsModule {}
  return ConnectionsModule;
}

async function clientCount(admin: Redis): Promise<number> {
  return String(await admin.client('LIST'))
    .split('\n')
    .filter((line) => line.startsWith('id=')).length;
}

/** Waits until the count has not changed for 300 ms (connections opened lazily have come), then answers it. */
async function settledCount(admin: Redis): Promise<number> {
  let last = await clientCount(admin);
  for (let stable = 0; stable < 3;) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    const now = await clientCount(admin);
    stable = now === last ? stable + 1 : 0;
    last = now;
  }
  return last;
}

/** Starts a worker of `library` for `patterns` patterns; resolves with its close. */
async function startWorker(library: Library, url: string, patterns: number): Promise<() => Promise<unknown>> {
  const prefix = `conn${randomBytes(3).toString('hex')}`;
  const names = Array.from({ length: patterns }, (_, n) => `${prefix}.p${n}`);
  if (library === 'BullMQ' || library === 'Bee-Queue') return startAnchorWorkers(library, url, prefix, names);
  const module = moduleWith(handlersFor(patterns, prefix));
  const app: INestMicroservice =
    library === 'Nest Transport.REDIS'
      ? await NestFactory.createMicroservice(module, {
          transport: Transport.REDIS,
          options: { host: new URL(url).hostname, port: Number(new URL(url).port || 6379) },
          logger: false,
        })
      : await NestFactory.createMicroservice(module, {
          strategy: new RedisTaskTransport({ connection: url, prefix }),
          logger: false,
        });
  await app.listen();
  return () => app.close();
}

/** The table: connections per worker process, per library and pattern count. */
export async function connectionsTable(url: string): Promise<string> {
  const admin = new Redis(url);
  const counts = new Map<string, number>();
  try {
    for (const patterns of PATTERNS) {
      for (const library of LIBRARIES) {
        const before = await settledCount(admin);
        const close = await startWorker(library, url, patterns);
        counts.set(`${library} ${patterns}`, (await settledCount(admin)) - before);
        await close();
      }
    }
  } finally {
    admin.disconnect();
  }
  const rows = LIBRARIES.map(
    (library) => `| ${library} | ${PATTERNS.map((patterns) => counts.get(`${library} ${patterns}`)).join(' | ')} |`,
  );
  return [
    `| library | ${PATTERNS.map((n) => `${n} pattern${n > 1 ? 's' : ''}`).join(' | ')} |`,
    '|---|---:|---:|---:|',
    ...rows,
  ].join('\n');
}
