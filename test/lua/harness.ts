import { afterAll, afterEach, beforeEach } from '@jest/globals';
import { decodeEntry, encodeEntry } from '../../lib/core/model/codec.js';
import { QueueKeys } from '../../lib/core/redis/keys.js';
import { enqueueAnswer, gatewayOf, type ClaimOutcome } from '../../lib/core/redis/gateway.js';
import { pushEnqueueFields } from '../../lib/core/redis/enqueue-fields.js';
import { claimAs, deleteKeys, openRedis, testPrefix, type TestRedis } from '../support/redis.js';

/**
 * What every script spec of test/lua/scripts/ shares: one connection, a fresh prefix and queue per test (live
 * bindings: `prefix` and `keys` are the current test's), a registered worker `w1`, and helpers that call the
 * scripts as the library does. A spec calls `useLuaHarness()` once at its top.
 */
export const redis: TestRedis = openRedis();
export const gateway = gatewayOf(redis);
export let prefix: string;
export let keys: QueueKeys;
export const worker = 'w1';

export function entry(id: string, clientId = 'a', attempts = 0): string {
  // Entries are strings in Redis lists: equal content means equal member, so ids keep them apart.
  return encodeEntry({ id, clientId, payload: { id }, enqueuedAt: 1 }, attempts);
}

export interface Options {
  priority?: number;
  delayMs?: number;
  dedupKey?: string;
}

/** Calls enqueueTasks as the producer does; resolves with the script's per-task results. */
export async function enqueueWith(tasks: [clientId: string, id: string, options?: Options][]): Promise<(0 | string)[]> {
  const args: (string | number)[] = [];
  for (const [clientId, id, options = {}] of tasks) {
    const raw = encodeEntry({
      id,
      clientId,
      payload: { id },
      enqueuedAt: 1,
      ...(options.priority ? { priority: options.priority } : {}),
    });
    pushEnqueueFields(args, {
      id,
      clientId,
      entry: raw,
      priority: options.priority ?? 0,
      delayMs: options.delayMs ?? 0,
      deduplicationKey: options.dedupKey,
      deduplicationTtlMs: 60_000,
      awaitsReply: false,
    });
  }
  return enqueueAnswer(await redis.enqueueTasks(keys.root, ...args));
}

/** Enqueues plain tasks per client; resolves with how many were enqueued. */
export async function enqueue(...groups: [clientId: string, ids: string[]][]): Promise<number> {
  const results = await enqueueWith(
    groups.flatMap(([clientId, ids]) => ids.map((id) => [clientId, id] as [string, string])),
  );
  return results.filter((result) => result === 0).length;
}

/** Claims up to `count` tasks round-robin over the ring (the client id is what the ring says). */
export async function claim(
  _clientId: string,
  count: number,
  workerId = worker,
): Promise<string[] | 'unregistered' | 'paused'> {
  return claimAs(redis, keys, workerId, count);
}

/** Acknowledges one task with ackTasks (as the worker does, alone in its call); resolves 1 or 0. */
export async function ack(
  token: string,
  id: string,
  options: { dedupKey?: string; channel?: string; reply?: string } = {},
): Promise<boolean> {
  const reply = options.channel ? { channel: options.channel, message: options.reply ?? '' } : undefined;
  const [held] = await gateway.acknowledge(keys, worker, [
    { token, taskId: id, deduplicationKey: options.dedupKey || undefined, reply, resultTtlMs: 5_000 },
  ]);
  return held;
}

/** The token/entry pairs of a claim, or a throw saying why nothing was claimed. */
export function pairsOf(reply: readonly string[] | 'unregistered' | 'paused' | ClaimOutcome): readonly string[] {
  if (typeof reply === 'string') throw new Error(`claim refused (${reply})`);
  if ('kind' in reply) return pairsOf(reply.kind === 'claimed' ? reply.pairs : reply.kind);
  return reply;
}

export function ids(reply: readonly string[] | 'unregistered' | 'paused' | ClaimOutcome): string[] {
  return pairsOf(reply)
    .filter((_, i) => i % 2 === 1)
    .map((raw) => (decodeEntry(raw) as { ok: true; entry: { envelope: { id: string } } }).entry.envelope.id);
}

export function useLuaHarness(): void {
  beforeEach(async () => {
    prefix = testPrefix('lua');
    keys = new QueueKeys(prefix, 'resize');
    await gateway.heartbeat(keys, worker, 30_000);
  });

  afterEach(async () => {
    await deleteKeys(redis, prefix);
  });

  afterAll(async () => {
    await redis.quit();
  });
}
