import { afterAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RedisTaskAdmin, RedisUnavailableError } from '../../lib/index.js';
import { startRedisServer } from '../../scripts/redis-server.mjs';
import { startProducer } from '../support/nest.js';
import { testPrefix } from '../support/redis.js';

const closing: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closing.reverse()) await close();
});

describe('flow() while Redis restarts from AOF', () => {
  it('every call settles in time (created, or RedisUnavailableError); called again with their ids, each flow exists once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'flow-restart-'));
    closing.push(async () => rmSync(dir, { recursive: true, force: true }));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let server = await startRedisServer(args);
    closing.push(() => server.kill());
    const { client, module } = await startProducer(testPrefix('flow-restart'), {
      connection: server.url,
      enqueueTimeoutMs: 2_000,
    });
    closing.push(() => module.close());
    const nodes = [
      { id: 'a', pattern: 'restart.a' },
      { id: 'b', pattern: 'restart.b', deps: ['a'] },
    ];
    const ids: string[] = [];
    const outcomes: Record<string, number> = {};
    let stop = false;
    const lane = async (n: number) => {
      for (let call = 0; !stop; call++) {
        const id = `f-${n}-${call}`;
        ids.push(id);
        const started = Date.now();
        const outcome = await client.flow({ id, nodes }).then(
          () => 'created',
          (error: unknown) => (error instanceof RedisUnavailableError ? `unavailable ${error.written}` : String(error)),
        );
        // Each call answered within its deadline, whatever Redis did meanwhile.
        expect(Date.now() - started).toBeLessThan(2_000 + 1_000);
        outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
        if (outcome !== 'created') await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const lanes = Array.from({ length: 40 }, (_, n) => lane(n));
    for (let restart = 0; restart < 4; restart++) {
      await new Promise((resolve) => setTimeout(resolve, 200 + restart * 100));
      await server.kill();
      server = await startRedisServer(args, server.port);
    }
    stop = true;
    await Promise.all(lanes);
    // eslint-disable-next-line no-console -- the run's figures, for the log
    console.log(`flow() through 4 Redis restarts: ${JSON.stringify(outcomes)}`);
    expect(Object.keys(outcomes).every((outcome) => /^(created|unavailable (false|unknown))$/.test(outcome))).toBe(
      true,
    );
    expect(outcomes.created).toBeGreaterThan(0);
    // Called again: each exists once (a flow an earlier call made answers created: false), counted once.
    for (const id of ids) await client.flow({ id, nodes });
    const admin = new RedisTaskAdmin(client);
    expect((await admin.flowCounts()).created).toBe(ids.length);
    for (const id of ids.slice(0, 20)) {
      const flow = await admin.getFlow(id);
      expect(flow.nodes.map((node) => [node.id, node.state])).toEqual([
        ['a', 'released'],
        ['b', 'waiting'],
      ]);
    }
  }, 120_000);
});
