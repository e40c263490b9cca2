import { randomBytes } from 'node:crypto';
import { firstValueFrom } from 'rxjs';
import { RedisTaskClient, type DurabilityOptions } from '../lib/index.js';

/** One durability setting: where its Redis is, and the client option it needs. */
export interface DurabilitySetting {
  readonly name: string;
  readonly url: string;
  readonly durability?: DurabilityOptions;
}

export interface DurabilityFigures {
  readonly name: string;
  readonly single: number;
  readonly batch: number;
}

const SINGLE = Number(process.env.BENCH_DURABLE_SINGLE ?? 2_000);
const BATCHES = 10;
const BATCH = 1_000;

/** Awaited single emits and emitBatch calls of 1,000 against one setting (tasks/s). */
export async function measureDurability(setting: DurabilitySetting): Promise<DurabilityFigures> {
  const prefix = `bench-durable-${randomBytes(3).toString('hex')}`;
  const client = new RedisTaskClient({ connection: setting.url, prefix, durability: setting.durability });
  await client.connect();
  try {
    for (let i = 0; i < 200; i++) await firstValueFrom(client.emit('durable', { i })); // warm-up
    let start = performance.now();
    for (let i = 0; i < SINGLE; i++) await firstValueFrom(client.emit('durable', { i }));
    const single = SINGLE / ((performance.now() - start) / 1000);
    start = performance.now();
    for (let b = 0; b < BATCHES; b++) {
      await client.emitBatch(
        'durable',
        Array.from({ length: BATCH }, (_, i) => ({ i })),
      );
    }
    const batch = (BATCHES * BATCH) / ((performance.now() - start) / 1000);
    const redis = client.unwrap<{
      del(...keys: string[]): Promise<number>;
      keys(pattern: string): Promise<string[]>;
    }>();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    return { name: setting.name, single, batch };
  } finally {
    await client.close();
  }
}

/** The settings `scripts/bench.mjs` started servers for (passed in the environment). */
export function durabilitySettings(baseUrl: string): DurabilitySetting[] {
  const settings: DurabilitySetting[] = [{ name: 'no persistence (RDB/AOF off)', url: baseUrl }];
  const env = process.env;
  if (env.BENCH_AOF_EVERYSEC_URL) settings.push({ name: 'AOF, appendfsync everysec', url: env.BENCH_AOF_EVERYSEC_URL });
  if (env.BENCH_AOF_ALWAYS_URL) settings.push({ name: 'AOF, appendfsync always', url: env.BENCH_AOF_ALWAYS_URL });
  if (env.BENCH_REPLICATED_URL) {
    settings.push({
      name: 'durability { replicas: 1 } (WAIT, one replica)',
      url: env.BENCH_REPLICATED_URL,
      durability: { replicas: 1, timeoutMs: 1_000 },
    });
  }
  if (env.BENCH_REPLICATED_ALWAYS_URL) {
    settings.push({
      name: 'AOF always on primary and replica + durability { replicas: 1 }',
      url: env.BENCH_REPLICATED_ALWAYS_URL,
      durability: { replicas: 1, timeoutMs: 1_000 },
    });
  }
  return settings;
}
