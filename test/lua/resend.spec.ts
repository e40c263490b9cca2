import { afterAll, describe, expect, it } from '@jest/globals';
import type { Command } from 'ioredis';
import { PrefixKeys } from '../../lib/core/redis/keys.js';
import { CALL_MARKER } from '../../lib/core/redis/call-record.js';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { deleteKeys, openRedis, snapshotKeys, testPrefix, scriptNamesBySha } from '../support/redis.js';
import { scenarios } from './scenarios.js';

// ioredis writes a command again after a reconnection when its reply was lost (autoResendUnfulfilledCommands),
// whether or not Redis ran it. For every script: run its call, then send the very same command again (as
// ioredis would, an enqueue call marked resent as the client marks it), and require that the second run
// changed nothing: no task written, moved or counted twice. The exceptions are stated with their reason.

const redis = openRedis();
const worker = 'w1';
const SCENARIOS = scenarios(redis, worker);
const scripts = readScriptDefinitions();
const shas = scriptNamesBySha();

/** What a second run of these may change, and why that duplicates no work. */
const RESEND_CHANGES: Record<string, { readonly why: string; readonly keys: RegExp }> = {
  claimTasks: {
    why: 'a resent claim takes further tasks under tokens of its own; no handler runs them, and the lease returns them to their queue uncounted once two heartbeats found them held by no run',
    keys: /^:\{q\}:(processing:w1|ring|pending:\w+|priority:\w+|sequence|pending-count|prioritized|counted|inflight|parked)$/,
  },
  heartbeatWorker: {
    why: 'a resent heartbeat renews the lease once more (later expiry and heartbeat time)',
    keys: /^:\{q\}:(workers|heartbeats)$/,
  },
};

afterAll(async () => {
  await redis.quit();
});

/** The wire arguments of the script call sent while `run` runs. */
async function wireOf(name: string, run: () => Promise<unknown>): Promise<string[]> {
  // Read once it was written: an enqueue call's record takes its form at its write (call-sequence.ts).
  let wire: Command | undefined;
  const original = redis.sendCommand.bind(redis);
  (redis as unknown as { sendCommand: (command: Command) => unknown }).sendCommand = (command: Command) => {
    if (command.name === 'evalsha' && shas.get(String(command.args[0])) === name) wire = command;
    return original(command);
  };
  try {
    await run();
  } finally {
    (redis as unknown as { sendCommand: unknown }).sendCommand = original;
  }
  if (!wire) throw new Error(`the ${name} scenario sent no ${name} call`);
  return wire.args.map(String);
}

describe('every script call sent a second time (ioredis resends it after a reconnection)', () => {
  it.each(scripts.map((script) => [script.name]))(
    '%s: the second run changes nothing, or only what its stated reason allows',
    async (name) => {
      const prefix = testPrefix(`resend-${name}`);
      const keys = new PrefixKeys(prefix).queue('q');
      try {
        const scenario = SCENARIOS[name];
        const state = await scenario.setup(keys);
        const wire = await wireOf(name, () => scenario.run(keys, state));
        const after = await snapshotKeys(redis, prefix);
        // As the client sends a resent enqueue call (its deadline has not passed): a first send ('1') goes
        // again as '2'; one numbered on its connection ('4', '5' renewing its mark) as '6' ('7').
        const numKeys = Number(wire[1]);
        const head = wire[2 + numKeys];
        const resent: Record<string, string> = { '1': '2', '4': '6', '5': '7' };
        if (head?.startsWith(CALL_MARKER))
          wire[2 + numKeys] = `${CALL_MARKER}${resent[head[1]] ?? head[1]}${head.slice(2)}`;
        await redis.call('evalsha', ...wire);
        const again = await snapshotKeys(redis, prefix);
        const changed = Object.keys({ ...after, ...again })
          .filter((key) => after[key] !== again[key])
          .map((key) => key.slice(prefix.length));
        const allowed = RESEND_CHANGES[name]?.keys;
        expect(changed.filter((key) => !allowed?.test(key))).toEqual([]);
      } finally {
        await deleteKeys(redis, prefix);
      }
    },
  );

  it('allows a change only to scripts that exist, each with its reason', () => {
    expect(
      Object.entries(RESEND_CHANGES).filter(
        ([name, { why }]) => !scripts.some((script) => script.name === name) || why.length < 20,
      ),
    ).toEqual([]);
  });
});
