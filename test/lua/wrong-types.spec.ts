import { afterAll, describe, expect, it } from '@jest/globals';
import type { Command } from 'ioredis';
import { encodeEntry } from '../../lib/core/model/codec.js';
import { pushEnqueueArgs } from '../../lib/core/producer/task-items.js';
import { gatewayOf } from '../../lib/core/redis/gateway.js';
import { PrefixKeys, type QueueKeys } from '../../lib/core/redis/keys.js';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { claimAs, deleteKeys, openRedis, snapshotKeys, testPrefix } from '../support/redis.js';

// Generated from the scripts' contract headers: for every script and every key it is given (KEYS) or
// names from its root (the keys its header lists under "Builds keys"), the key is made the wrong type,
// the script runs on an otherwise sound queue, and then either
// - it failed, naming the key, and nothing under the prefix changed (no script fails halfway), or
// - it succeeded, having set the key aside (quarantined and recorded in faults) or not written it.

const redis = openRedis();
const gateway = gatewayOf(redis);
const worker = 'w1';
const scripts = readScriptDefinitions();
const shas = new Map(scripts.map((script) => [script.sha, script.name]));

afterAll(async () => {
  await redis.quit();
});

/** The KEYS of every script call sent on `redis` while `run` runs (EVALSHA/EVAL, numkeys as sent). */
async function keysOfCalls(run: () => Promise<unknown>): Promise<Map<string, string[]>> {
  const seen = new Map<string, string[]>();
  const original = redis.sendCommand.bind(redis);
  (redis as unknown as { sendCommand: (command: Command) => unknown }).sendCommand = (command: Command) => {
    if (command.name === 'evalsha') {
      const args = command.args.map(String);
      const name = shas.get(args[0]);
      if (name) seen.set(name, args.slice(2, 2 + Number(args[1])));
    }
    return original(command);
  };
  try {
    await run();
  } finally {
    (redis as unknown as { sendCommand: unknown }).sendCommand = original;
  }
  return seen;
}

type Kind = 'string' | 'list' | 'hash' | 'set' | 'zset';

/** A key's type as its header line describes it (undefined: not a key the script writes as a value). */
function kindOf(description: string, key: string): Kind | undefined {
  if (/not a key itself/.test(description)) return undefined;
  if (/\bany key of the queue\b/.test(description) && !key.includes(':dedup:')) return undefined;
  if (/pending lists and priority sets/.test(description)) return key.includes(':priority:') ? 'zset' : 'list';
  if (/\(hash\b/.test(description)) return 'hash';
  if (/\(sorted set|\(zset|priority set/.test(description)) return 'zset';
  if (/\(set\b/.test(description)) return 'set';
  if (/\(list\b|pending list/.test(description)) return 'list';
  if (/\(string\b|string counter|deduplication key|the lock/.test(description)) return 'string';
  throw new Error(`no type in the header line "${description}"`);
}

/** The header's description of each KEYS index (a variable range describes every index past it). */
function headerKeys(lua: string): { fixed: Map<number, string>; rest?: string } {
  const fixed = new Map<number, string>();
  let rest: string | undefined;
  let last: { index?: number } | undefined;
  for (const line of lua.split('\n')) {
    const one = /^-- KEYS\[(\d+)\]: (.*)$/.exec(line);
    const range = /^-- KEYS\[\d+\.\.[^\]]*\]: (.*)$/.exec(line);
    if (one) {
      fixed.set(Number(one[1]), one[2]);
      last = { index: Number(one[1]) };
    } else if (range) {
      rest = range[1];
      last = {};
    } else if (last && line.startsWith('--   ')) {
      // A description goes on over indented lines.
      if (last.index === undefined) rest += ` ${line.slice(5)}`;
      else fixed.set(last.index, `${fixed.get(last.index)} ${line.slice(5)}`);
    } else {
      last = undefined;
    }
  }
  return { fixed, rest };
}

/** What a queue's root names (scripts that get one key and build the others from it), with their types. */
function builtKeys(keys: QueueKeys, client: string): [string, Kind][] {
  return [
    [keys.ring, 'list'], [keys.processing(worker), 'hash'], [keys.faults, 'hash'], [keys.workers, 'zset'], [keys.prioritized, 'string'],
    [keys.counted, 'hash'], [keys.inflight, 'hash'], [keys.parked, 'set'], [keys.counters, 'hash'], [keys.weights, 'hash'],
    [keys.credit, 'hash'], [keys.rates, 'hash'], [keys.throttled, 'zset'], [keys.buckets, 'hash'], [keys.sequence, 'string'],
    [keys.pendingCount, 'string'], [keys.pending(client), 'list'], [keys.priority(client), 'zset'], [keys.delayed, 'zset'],
    [keys.dedup('d1'), 'string'], [keys.groups, 'set'], [keys.deadLetters, 'list'], [keys.history, 'hash'],
  ];
}

function entry(id: string, clientId = 'a', attempts = 0, priority = 0): string {
  return encodeEntry({ id, clientId, payload: { id }, enqueuedAt: 1, ...(priority ? { priority } : {}) }, attempts);
}

async function enqueue(keys: QueueKeys, tasks: { id: string; client?: string; priority?: number; delayMs?: number; dedup?: string }[]): Promise<unknown> {
  const args: (string | number)[] = [];
  for (const task of tasks) {
    const client = task.client ?? 'a';
    pushEnqueueArgs(args, {
      id: task.id, clientId: client, entry: entry(task.id, client, 0, task.priority ?? 0), priority: task.priority ?? 0,
      delayMs: task.delayMs ?? 0, deduplicationKey: task.dedup, deduplicationTtlMs: 60_000, awaitsReply: false,
    });
  }
  return gateway.enqueue(keys, args);
}

/** Claims what the queue holds for `worker` (registered first); the token/entry pairs. */
async function claimAll(keys: QueueKeys, cap = 0): Promise<string[]> {
  await gateway.heartbeat(keys, worker, 60_000);
  const claimed = await claimAs(redis, keys, worker, 10, [], cap);
  if (!Array.isArray(claimed)) throw new Error(`nothing claimed: ${claimed}`);
  return claimed;
}

interface Scenario {
  /** Puts the queue in the state the script's call expects (tasks waiting, claimed, delayed...). */
  setup(keys: QueueKeys): Promise<unknown>;
  /** The script's call, as its caller makes it. */
  run(keys: QueueKeys, state: unknown): Promise<unknown>;
}

const sound = (keys: QueueKeys) => enqueue(keys, [{ id: 'p1' }, { id: 'p2', priority: 3 }, { id: 'p3', client: 'b', dedup: 'd1' }]);

const SCENARIOS: Record<string, Scenario> = {
  enqueueTasks: {
    setup: (keys) => redis.sadd(keys.groups, 'default'),
    run: (keys) => enqueue(keys, [{ id: 'n1' }, { id: 'n2', priority: 2 }, { id: 'n3', delayMs: 5_000 }, { id: 'n4', dedup: 'd1' }]),
  },
  claimTasks: {
    setup: async (keys) => {
      await sound(keys);
      await gateway.heartbeat(keys, worker, 60_000);
    },
    run: (keys) => gateway.claim(keys, { workerId: worker, wanted: 5, clientConcurrency: 2, tokenPrefix: 'x.', acks: ['x.0.00001'] }),
  },
  ackTasks: {
    setup: async (keys) => {
      await sound(keys);
      return claimAll(keys, 2);
    },
    run: (keys, claimed) => {
      const [t1, , t2, , t3] = claimed as string[];
      return gateway.acknowledge(keys, worker, [t1, 'p1', '', 'chan', '"r"', 5_000, t2, 'p2', '', '', '', 5_000, t3, 'p3', 'd1', '', '', 5_000]);
    },
  },
  retryTask: {
    setup: async (keys) => {
      await sound(keys);
      return claimAll(keys, 2);
    },
    run: (keys, claimed) => gateway.retry(keys, worker, (claimed as string[])[0], 1_000),
  },
  deadLetterTask: {
    setup: async (keys) => {
      await sound(keys);
      return claimAll(keys, 2);
    },
    run: (keys, claimed) =>
      gateway.deadLetter(keys, worker, (claimed as string[])[4], {
        record: '{"reason":"failed"}', cap: 10, taskId: 'p3', deduplicationKey: 'd1', reply: { channel: 'chan', message: '{}', ttlMs: 5_000 },
      }),
  },
  requeueTasks: {
    setup: async (keys) => {
      await sound(keys);
      return claimAll(keys, 2);
    },
    run: (keys, claimed) => {
      const [t1, , t2, , t3] = claimed as string[];
      return gateway.requeue(keys, worker, true, [
        { token: t3, clientId: 'b', priority: 0 }, { token: t2, clientId: 'a', priority: 0 }, { token: t1, clientId: 'a', priority: 3 },
      ]);
    },
  },
  promoteTasks: {
    setup: (keys) => redis.zadd(keys.delayed, 1, entry('d1'), 2, entry('d2', 'a', 1, 4)),
    run: (keys) => gateway.promote(keys, [{ entry: entry('d1'), clientId: 'a', priority: 0 }, { entry: entry('d2', 'a', 1, 4), clientId: 'a', priority: 4 }]),
  },
  deadLetterDelayed: {
    setup: (keys) => redis.zadd(keys.delayed, 1, entry('d1')),
    run: (keys) => gateway.deadLetterDelayed(keys, entry('d1'), '{"reason":"expired"}', 10),
  },
  requeueDeadLetters: {
    setup: (keys) => redis.lpush(keys.deadLetters, '{"id":"x1"}', '{"id":"x2"}'),
    run: (keys) =>
      gateway.requeueDeadLetters(keys, [
        { raw: '{"id":"x1"}', clientId: 'a', entry: entry('x1'), priority: 0 },
        { raw: '{"id":"x2"}', clientId: 'a', entry: entry('x2', 'a', 0, 2), priority: 2 },
      ]),
  },
  cancelTask: {
    setup: (keys) => enqueue(keys, [{ id: 'c1', priority: 2, dedup: 'd1' }, { id: 'c2' }]),
    run: (keys) => gateway.cancel(keys, { clientId: 'a', entry: entry('c1', 'a', 0, 2), priority: 2, deduplicationKey: 'd1', id: 'c1' }),
  },
  heartbeatWorker: {
    setup: async (keys) => {
      await sound(keys);
      return claimAll(keys);
    },
    run: (keys, claimed) => gateway.heartbeat(keys, worker, 5_000, [(claimed as string[])[0]]),
  },
  forgetWorker: {
    setup: (keys) => redis.zadd(keys.workers, 1, worker),
    run: (keys) => gateway.forgetWorker(keys, worker, Date.now()),
  },
  releaseLock: {
    setup: (keys) => redis.set(keys.reaperLock, 'me'),
    run: (keys) => gateway.releaseReaperLock(keys, 'me'),
  },
  releaseThrottled: {
    setup: (keys) => redis.zadd(keys.throttled, 1, 'a'),
    run: (keys) => gateway.releaseThrottled(keys, Date.now()),
  },
  snapshotCounters: {
    setup: (keys) => redis.hset(keys.counters, 'completed', 3),
    run: (keys) => gateway.snapshotCounters(keys),
  },
  recordShardCount: {
    setup: async () => undefined,
    run: (keys) => gateway.recordShardCount(new PrefixKeys(keys.root.slice(0, keys.root.indexOf(':{'))), keys.queue, 1),
  },
  rejoinClient: {
    setup: async (keys) => {
      await sound(keys);
      await redis.lrem(keys.ring, 0, 'a');
    },
    run: (keys) => gateway.rejoinClient(keys, 'a'),
  },
  readOverview: {
    setup: sound,
    run: (keys) => gateway.readOverview(keys, 10),
  },
};

/**
 * Keys a script writes with a plain SET, which replaces a value of any type: such a write cannot fail,
 * so it cannot leave a script halfway (a send() task's result key).
 */
const OVERWRITTEN = /:result:/;

/** Makes `key` hold a type other than `kind` (its old value gone). */
async function breakKey(key: string, kind: Kind): Promise<void> {
  await redis.del(key);
  if (kind === 'string') await redis.rpush(key, 'stray');
  else await redis.set(key, 'stray');
}

/** Every (key, kind) a script call writes or reads as a value, from its header and the KEYS it was sent. */
async function keysOf(name: string, lua: string, scenario: Scenario): Promise<[string, Kind][]> {
  const prefix = testPrefix(`types-${name}`);
  const keys = new PrefixKeys(prefix).queue('q');
  try {
    const state = await scenario.setup(keys);
    const sent = (await keysOfCalls(() => scenario.run(keys, state))).get(name);
    if (!sent) throw new Error(`the ${name} scenario sent no ${name} call`);
    const { fixed, rest } = headerKeys(lua);
    const found: [string, Kind][] = [];
    sent.forEach((key, index) => {
      const description = fixed.get(index + 1) ?? rest;
      if (description === undefined) throw new Error(`${name}: KEYS[${index + 1}] is not in its header`);
      const kind = kindOf(description, key);
      if (kind) found.push([key, kind]);
    });
    // A script sent one root builds the others from it: each of those too.
    if (lua.includes('\n-- Builds keys: ') && sent.length === 1) found.push(...builtKeys(keys, 'a'));
    return found.map(([key, kind]) => [key.slice(prefix.length), kind]);
  } finally {
    await deleteKeys(redis, prefix);
  }
}

describe('every script against a key of the wrong type: it fails naming the key and changes nothing, or it sets the key aside and goes on', () => {
  it('has a scenario for every script', () => {
    expect(Object.keys(SCENARIOS).sort()).toEqual(scripts.map((script) => script.name).sort());
  });

  describe.each(scripts.map((script) => [script.name, script.lua] as const))('%s', (name, lua) => {
    it('leaves Redis as it found it, or heals, for every key it is given or builds', async () => {
      const scenario = SCENARIOS[name];
      const keyList = await keysOf(name, lua, scenario);
      expect(keyList.length).toBeGreaterThan(0);
      const failures: string[] = [];
      for (const [suffix, kind] of keyList) {
        const prefix = testPrefix(`types-${name}`);
        const keys = new PrefixKeys(prefix).queue('q');
        const key = prefix + suffix;
        try {
          const state = await scenario.setup(keys);
          await breakKey(key, kind);
          const before = await snapshotKeys(redis, prefix);
          const outcome = await scenario.run(keys, state).then(
            () => undefined,
            (error: unknown) => error as Error,
          );
          const after = await snapshotKeys(redis, prefix);
          if (outcome) {
            if (!outcome.message.includes(key)) failures.push(`${suffix} (${kind}): the error does not name the key: ${outcome.message}`);
            if (JSON.stringify(after) !== JSON.stringify(before)) {
              const changed = Object.keys({ ...before, ...after }).filter((k) => before[k] !== after[k]).map((k) => k.slice(prefix.length));
              failures.push(`${suffix} (${kind}): failed after writing ${changed.join(', ')}`);
            }
          } else if (after[key] !== before[key] && !OVERWRITTEN.test(suffix)) {
            // Succeeded and touched the key: only by setting it aside or resetting it (a counter), on the record.
            const recorded = (await redis.hget(keys.faults, key).catch(() => null)) !== null;
            if (!recorded) failures.push(`${suffix} (${kind}): succeeded and changed the broken key without recording it in faults`);
          }
        } finally {
          await deleteKeys(redis, prefix);
        }
      }
      expect(failures).toEqual([]);
    });
  });
});
