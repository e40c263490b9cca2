import { afterAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { deleteKeys, keysUnder, openRedis, redisUrl, testPrefix, waitFor } from '../support/redis.js';
import { scenarios } from './scenarios.js';

// Idle workers wait for a message on `<base>:wake` (one subscriber connection per process, whatever its
// patterns), not on the ring itself: a script that puts a client on an empty ring and says nothing would
// leave its tasks to the backstop claim. For every script: its scenario's state with every ring under the
// prefix removed, then its call; each ring the call made (it was empty, it is not) must have been told on
// its wake channel and its bell rung (the token one blocked process takes). A generated test, so a script
// added later is checked too.

const redis = openRedis();
const subscriber = new Redis(redisUrl());
const scripts = readScriptDefinitions();
const SCENARIOS = scenarios(redis, 'w1');
const heard: string[] = [];
subscriber.on('pmessage', (_pattern: string, channel: string) => heard.push(channel));

/** The scripts whose scenario puts a client on an emptied ring (each must be among those found doing so). */
const RING_WRITERS = [
  'ackTasks',
  'deadLetterTask',
  'enqueueTasks',
  'promoteTasks',
  'rejoinClient',
  'releaseThrottled',
  'requeueDeadLetters',
  'requeueTasks',
];

afterAll(async () => {
  await Promise.all([redis.quit(), subscriber.quit()]);
});

const rings = async (prefix: string): Promise<string[]> =>
  (await keysUnder(redis, prefix)).filter((key) => key.endsWith(':ring')).sort();

describe('every push onto an empty ring tells its workers (generated over every script)', () => {
  const wrote: string[] = [];

  it.each(scripts.map((script) => [script.name]))('%s', async (name) => {
    const prefix = testPrefix(`wake-${name}`);
    const keys = new PrefixKeys(prefix).queue('q');
    try {
      const scenario = SCENARIOS[name];
      const state = await scenario.setup(keys);
      for (const ring of await rings(prefix)) await redis.del(ring, ring.replace(/ring$/, 'bell'));
      await subscriber.psubscribe(`${prefix}*`);
      heard.length = 0;
      await scenario.run(keys, state).catch(() => undefined);
      const made = await rings(prefix);
      if (made.length > 0) wrote.push(name);
      // Messages come on their own connection: one published after the call, once heard, marks that all have come.
      const marker = `${prefix}:marker`;
      await redis.publish(marker, '');
      await waitFor(() => heard.includes(marker), 'the marker message');
      const told = new Set(heard);
      expect(made.filter((ring) => !told.has(ring.replace(/ring$/, 'wake')))).toEqual([]);
      // And rang its bell: one token, which wakes one process blocked on it.
      for (const ring of made) expect(await redis.llen(ring.replace(/ring$/, 'bell'))).toBe(1);
    } finally {
      await subscriber.punsubscribe(`${prefix}*`);
      await deleteKeys(redis, prefix);
    }
  });

  it('found the scripts that put clients on a ring doing so', () => {
    expect(wrote).toEqual(expect.arrayContaining(RING_WRITERS));
  });
});
