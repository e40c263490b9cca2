import { afterAll, describe, expect, it } from '@jest/globals';
import { PrefixKeys, type QueueKeys } from '../../lib/core/redis/keys.js';
import { LUA_HELPERS, LUA_INCLUDES } from '../../lib/core/redis/scripts/sources.generated.js';
import { deleteKeys, openRedis, testPrefix } from '../support/redis.js';
import { queueHelpers } from './scenarios.js';

// The seam (include/follow.lua): every script that moves a task hands the move to each per-task feature.
// Generated from the sources: each script that includes the seam, run on a task of each feature the seam
// knows (tracking, and every feature with an entry head), must leave the feature's record as the table
// says. A new moving script or a new feature fails here until its row says what follows.

const redis = openRedis();
const worker = 'w1';
const helpers = queueHelpers(redis, worker);
const { gateway, entry, enqueue, claimAll } = helpers;

afterAll(async () => {
  await redis.quit();
});

/** The scripts that move a task through the seam, and the features the seam hands moves to. */
const MOVING = Object.entries(LUA_HELPERS)
  .filter(([, names]) => names.includes('follow'))
  .map(([file]) => file.replace(/-\d+(\+n)?\.lua$/, ''))
  .sort();
const HEADS = new Set([...LUA_INCLUDES.follow.matchAll(/kind == '(\w+)'/g)].map((match) => match[1]));
// Durable steps follow every task, whatever its head: the seam deletes them on the moves that end a task.
const FEATURES = ['track', ...(LUA_INCLUDES.follow.includes('stepsEndEntry') ? ['steps'] : []), ...HEADS].sort();

type Feature = 'track' | 'coalesce' | 'batch' | 'flow' | 'steps';

/** Task t1 of client a, carrying `feature`: its enqueue options and its entry as enqueued. */
function taskOf(feature: Feature, delayMs = 0) {
  return {
    id: 't1',
    delayMs,
    track: feature === 'track',
    ...(feature === 'coalesce' ? { coalesce: 'replace' as const } : {}),
    ...(feature === 'batch' ? { batch: 'b1' } : {}),
    ...(feature === 'flow' ? { flow: 'f1' } : {}),
  };
}
const entryOf = (feature: Feature) =>
  entry(
    't1',
    'a',
    0,
    0,
    feature === 'coalesce' ? 'replace' : undefined,
    feature === 'batch' ? 'b1' : undefined,
    feature === 'flow' ? 'f1' : undefined,
  );
const trackedOf = (keys: QueueKeys, feature: Feature) => (feature === 'track' ? keys.tracked('t1') : undefined);

/** t1 claimed by the worker and started as its feature starts it: its fencing token. */
async function held(keys: QueueKeys, feature: Feature): Promise<string> {
  await enqueue(keys, [taskOf(feature)]);
  const [token] = await claimAll(keys);
  if (feature === 'coalesce') await gateway.track.startCoalesced(keys, worker, [{ token, id: 't1' }]);
  if (feature === 'track') await gateway.track.start(keys, worker, [{ token, id: 't1', attempt: 1 }]);
  return token;
}

/** Each moving script's call on t1, from the state it moves a task out of. */
const MOVES: Record<string, (keys: QueueKeys, feature: Feature) => Promise<unknown>> = {
  ackTasks: async (keys, feature) =>
    gateway.acknowledge(keys, worker, [
      { token: await held(keys, feature), taskId: 't1', resultTtlMs: 5_000, tracked: trackedOf(keys, feature) },
    ]),
  retryTask: async (keys, feature) =>
    gateway.retry(keys, worker, await held(keys, feature), 1_000, trackedOf(keys, feature)),
  deadLetterTask: async (keys, feature) =>
    gateway.deadLetter(keys, worker, await held(keys, feature), {
      record: '{"reason":"failed"}',
      cap: 10,
      taskId: 't1',
      tracked: trackedOf(keys, feature),
    }),
  requeueTasks: async (keys, feature) =>
    gateway.requeue(keys, worker, false, [
      { token: await held(keys, feature), clientId: 'a', priority: 0, tracked: trackedOf(keys, feature) },
    ]),
  cancelTask: async (keys, feature) => {
    await enqueue(keys, [taskOf(feature)]);
    return gateway.track.cancel(keys, {
      clientId: 'a',
      entry: entryOf(feature),
      priority: 0,
      id: 't1',
      track: feature === 'track',
    });
  },
  dropHeld: async (keys, feature) => gateway.batch.dropHeld(keys, worker, await held(keys, feature), 'b1'),
  requeueDeadLetters: async (keys, feature) => {
    await redis.lpush(keys.deadLetters, '{"id":"t1"}');
    // A tracked task's index outlives its death (keepMs): its revival is told to it.
    const track = feature === 'track';
    if (track)
      await redis.hset(
        keys.task('t1'),
        'id',
        't1',
        'state',
        'dead',
        'keep',
        60_000,
        'live',
        60_000,
        'reason',
        'failed',
      );
    const tracked = track ? keys.tracked('t1') : undefined;
    return gateway.requeueDeadLetters(keys, [
      { raw: '{"id":"t1"}', clientId: 'a', entry: entryOf(feature), priority: 0, tracked },
    ]);
  },
  deadLetterDelayed: async (keys, feature) => {
    await enqueue(keys, [taskOf(feature, 60_000)]);
    return gateway.deadLetterDelayed(keys, entryOf(feature), '{"reason":"malformed"}', 10);
  },
};

/** What each feature's record says of t1 after the move. */
const OBSERVE: Record<Feature, (keys: QueueKeys) => Promise<string>> = {
  track: async (keys) => (await redis.hget(keys.task('t1'), 'state')) ?? 'no index',
  coalesce: async (keys) => {
    const record = await redis.hgetall(keys.coalesce('k1'));
    if (Object.keys(record).length === 0) return 'no record';
    const runners = Object.keys(record).filter((field) => field.startsWith('r:')).length;
    return record.id ? `waits ${record.id} in ${record.where}` : `runs ${runners}`;
  },
  batch: async (keys) => {
    const last = await redis.lindex(keys.batchEvents, -1);
    return last ? `event ${last.split('\n')[3]}` : 'no event';
  },
  flow: async (keys) => {
    const last = await redis.lindex(keys.flowEvents, -1);
    return last ? `event ${last.split('\n')[3]}` : 'no event';
  },
  steps: async (keys) => ((await redis.exists(keys.steps('t1'))) === 1 ? 'steps kept' : 'steps gone'),
};

/** What follows each move, per feature (and why, where a feature has no part in the move). */
const FOLLOWS: Record<string, Record<Feature, string>> = {
  ackTasks: { track: 'completed', coalesce: 'no record', batch: 'event s', flow: 'event s', steps: 'steps gone' },
  retryTask: { track: 'delayed', coalesce: 'waits t1 in d', batch: 'no event', flow: 'no event', steps: 'steps kept' },
  deadLetterTask: { track: 'dead', coalesce: 'no record', batch: 'event d', flow: 'event d', steps: 'steps gone' },
  requeueTasks: {
    track: 'pending',
    coalesce: 'waits t1 in q',
    batch: 'no event',
    flow: 'no event',
    steps: 'steps kept',
  },
  // A cancelled waiting task of a coalescing key frees its key: the next emit is placed anew.
  cancelTask: { track: 'cancelled', coalesce: 'no record', batch: 'event c', flow: 'event c', steps: 'steps gone' },
  // Only a task of the cancelled batch is dropped: others keep running (a flow's node is stopped by id instead), their steps kept.
  dropHeld: { track: 'running', coalesce: 'runs 1', batch: 'event c', flow: 'no event', steps: 'steps kept' },
  // A dead letter revived is a fresh run: its index (kept since its death) says it waits again, its batch and its
  // flow wait for it again (no record before; its steps went when it was dead-lettered).
  requeueDeadLetters: {
    track: 'pending',
    coalesce: 'no record',
    batch: 'event p',
    flow: 'event p',
    steps: 'steps kept',
  },
  // The reaper dead-letters an entry it cannot run; its index (named only in the entry) keeps its state
  // until it expires, its key's slot is freed, its batch hears it.
  deadLetterDelayed: {
    track: 'delayed',
    coalesce: 'no record',
    batch: 'event d',
    flow: 'event d',
    steps: 'steps gone',
  },
};

describe('the seam: what follows a task that moves', () => {
  it('has a row for every moving script and every feature (derived from the Lua sources)', () => {
    expect(MOVING.length).toBeGreaterThanOrEqual(8);
    expect(Object.keys(FOLLOWS).sort()).toEqual(MOVING);
    expect(Object.keys(MOVES).sort()).toEqual(MOVING);
    expect(FEATURES).toEqual(['batch', 'coalesce', 'flow', 'steps', 'track']);
    for (const row of Object.values(FOLLOWS)) expect(Object.keys(row).sort()).toEqual(FEATURES);
  });

  const cases = MOVING.flatMap((script) => FEATURES.map((feature) => [script, feature as Feature] as const));
  it.each(cases)('%s on a task of feature %s', async (script, feature) => {
    const prefix = testPrefix(`follow-${script}-${feature}`);
    const keys = new PrefixKeys(prefix).queue('q');
    try {
      await redis.sadd(keys.groups, 'default');
      // A plain task whose runs saved a step (what saveStep writes).
      if (feature === 'steps') await redis.hset(keys.steps('t1'), 'r:a', '=1', 'done', 1);
      await MOVES[script](keys, feature);
      expect(await OBSERVE[feature](keys)).toBe(FOLLOWS[script][feature]);
    } finally {
      await deleteKeys(redis, prefix);
    }
  });
});
