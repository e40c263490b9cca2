import { describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { freePort, startRedisServer } from '../../scripts/redis-server.mjs';

/**
 * The throwaway servers the suites start (scripts/redis-server.mjs): suites run in parallel Jest workers, and a
 * test that restarts a server on its port must never be handed another suite's server that took the port meanwhile.
 */
describe('throwaway redis-servers of the tests (scripts/redis-server.mjs)', () => {
  it("never returns another process's server for a port: a restart on a port another Redis holds fails naming it", async () => {
    const holder = await startRedisServer();
    try {
      await expect(startRedisServer([], holder.port)).rejects.toThrow(
        new RegExp(`port ${holder.port} is held by another Redis \\(pid ${holder.pid}\\)`),
      );
      // The holder still answers, untouched.
      const redis = new Redis(holder.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
      await redis.connect();
      expect(await redis.ping()).toBe('PONG');
      redis.disconnect();
    } finally {
      await holder.stop();
    }
  });

  it("hands out each port once per process, from its Jest worker's own block below the ephemeral range", async () => {
    const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
    expect(new Set(ports).size).toBe(ports.length);
    const block = Math.min(...ports) - 11_000;
    const worker = Number(process.env.JEST_WORKER_ID) || 0;
    expect(Math.floor(block / 500)).toBe(worker % 20);
    expect(Math.max(...ports) + 10_000).toBeLessThan(32_768);
  });
});
