import { afterAll, describe, expect, it } from '@jest/globals';
import type { Command } from 'ioredis';
import { PrefixKeys, type QueueKeys } from '../../lib/core/redis/keys.js';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { deleteKeys, openRedis, snapshotKeys, testPrefix, scriptNamesBySha } from '../support/redis.js';
import { scenarios, type Scenario } from './scenarios.js';

// Generated from the scripts' contract headers: for every script and every key it is given (KEYS) or
// names from its root (the keys its header lists under "Builds keys"), the key is made the wrong type,
// the script runs on an otherwise sound queue, and then either
// - it failed, naming the key, and nothing under the prefix changed (no script fails halfway), or
// - it succeeded, having set the key aside (quarantined and recorded in faults) or not written it.

const redis = openRedis();
const worker = 'w1';
const SCENARIOS = scenarios(redis, worker);
const scripts = readScriptDefinitions();
const shas = scriptNamesBySha();

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
    [keys.ring, 'list'],
    [keys.processing(worker), 'hash'],
    [keys.faults, 'hash'],
    [keys.workers, 'zset'],
    [keys.prioritized, 'string'],
    [keys.counted, 'hash'],
    [keys.inflight, 'hash'],
    [keys.parked, 'set'],
    [keys.counters, 'hash'],
    [keys.weights, 'hash'],
    [keys.credit, 'hash'],
    [keys.rates, 'hash'],
    [keys.throttled, 'zset'],
    [keys.buckets, 'hash'],
    [keys.sequence, 'string'],
    [keys.pendingCount, 'string'],
    [keys.pending(client), 'list'],
    [keys.priority(client), 'zset'],
    [keys.delayed, 'zset'],
    [keys.dedup('d1'), 'string'],
    [keys.groups, 'set'],
    [keys.deadLetters, 'list'],
    [keys.history, 'hash'],
    [keys.task('t1'), 'hash'],
    [keys.task('p1'), 'hash'],
    [keys.task('p2'), 'hash'],
    [keys.tracked('t1').entry, 'string'],
    [keys.tracked('p1').entry, 'string'],
    [keys.tracked('p2').entry, 'string'],
    [keys.task('c1'), 'hash'],
    [keys.tracked('c1').entry, 'string'],
    [keys.coalesce('k1'), 'hash'],
    [keys.batchEvents, 'list'],
    [keys.batchSeq, 'string'],
    [keys.pending('d'), 'list'],
    [keys.pending('c'), 'list'],
    [keys.priority('c'), 'zset'],
  ];
}

/**
 * Keys a script writes with a plain SET (or DEL), which replaces a value of any type: such a write cannot
 * fail, so it cannot leave a script halfway (a send() task's result key, a tracked task's entry key).
 */
const OVERWRITTEN = /:result:|:task-entry:/;

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
    // A script that builds keys from a root (or is handed an index key) builds those too: each of them.
    if (lua.includes('\n-- Builds keys: ') || lua.includes('index key')) {
      const given = new Set(found.map(([key]) => key));
      found.push(...builtKeys(keys, 'a').filter(([key]) => !given.has(key)));
    }
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
            if (!outcome.message.includes(key))
              failures.push(`${suffix} (${kind}): the error does not name the key: ${outcome.message}`);
            if (JSON.stringify(after) !== JSON.stringify(before)) {
              const changed = Object.keys({ ...before, ...after })
                .filter((k) => before[k] !== after[k])
                .map((k) => k.slice(prefix.length));
              failures.push(`${suffix} (${kind}): failed after writing ${changed.join(', ')}`);
            }
          } else if (after[key] !== before[key] && !OVERWRITTEN.test(suffix)) {
            // Succeeded and touched the key: only by setting it aside or resetting it (a counter), on the record.
            const recorded = (await redis.hget(keys.faults, key).catch(() => null)) !== null;
            if (!recorded)
              failures.push(`${suffix} (${kind}): succeeded and changed the broken key without recording it in faults`);
          }
        } finally {
          await deleteKeys(redis, prefix);
        }
      }
      expect(failures).toEqual([]);
    });
  });
});
