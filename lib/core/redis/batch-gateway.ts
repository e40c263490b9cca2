import type { BatchCallback, BatchFire } from '../model/batch.js';
import type { BatchKeys, QueueKeys } from './keys.js';
import { settleKeys } from './script-keys.js';
import type { TaskRedis } from './scripts.js';

/**
 * A batch script's answer that the batch fires: its callbacks to enqueue, decided when the script was sent
 * (`asked`, Date.now() ms: their enqueue's deadline counts from then, see enqueueCallbacks).
 */
export type BatchFireAnswer = { readonly kind: 'fire'; readonly asked: number } & BatchFire;

/** What a batch script answered about firing: nothing yet, fire (its callbacks to enqueue), or no record. */
export type FireAnswer =
  | { readonly kind: 'none' }
  | { readonly kind: 'done'; readonly created: string }
  | { readonly kind: 'unknown' }
  | BatchFireAnswer;

/** The scripts of batches (see scripts/include/batchRecord.lua and include/batch.lua), one method each. */
export class BatchGateway {
  constructor(private readonly redis: TaskRedis) {}

  /**
   * openBatch: 'opened' when opened now, 'open' when open before, else the batch's state, with the ms until
   * its keys expire (-1: not set yet).
   */
  async open(
    keys: BatchKeys,
    complete: BatchCallback,
    success: BatchCallback | undefined,
    keepMs: number,
  ): Promise<{ state: string; ttlMs: number }> {
    const [state, ttlMs] = await this.redis.openBatch(
      keys.record,
      keys.children,
      JSON.stringify(complete),
      success ? JSON.stringify(success) : '',
      keepMs,
    );
    return { state, ttlMs: Number(ttlMs ?? -1) };
  }

  /** addBatchChildren: 'open' when the ids were added (to `pattern`), else the batch's state (nothing added). */
  add(keys: BatchKeys, pattern: string, ids: readonly string[]): Promise<string> {
    return this.redis.addBatchChildren(keys.record, keys.children, keys.patterns, '+', pattern, ...ids);
  }

  /** addBatchChildren: children whose enqueue wrote nothing taken back (the batch does not wait for them). */
  takeBack(keys: BatchKeys, ids: readonly string[]): Promise<string> {
    return this.redis.addBatchChildren(keys.record, keys.children, keys.patterns, '-', '', ...ids);
  }

  /**
   * countFlow over the batch counters: `counter` (opened, completed) counted once under `marker` (kept
   * `markerMs`), however often the call is sent; true when counted by this call.
   */
  async count(counters: string, marker: string, counter: 'opened' | 'completed', markerMs: number): Promise<boolean> {
    return (await this.redis.countFlow(counters, marker, counter, markerMs)) === 1;
  }

  async seal(keys: BatchKeys): Promise<FireAnswer> {
    const asked = Date.now();
    return fireAnswer(await this.redis.sealBatch(keys.record, keys.children), asked);
  }

  /** foldBatch: the events (seq, task id, outcome per event) applied; whether the batch fires. */
  async fold(keys: BatchKeys, events: readonly string[]): Promise<FireAnswer> {
    const asked = Date.now();
    return fireAnswer(await this.redis.foldBatch(keys.record, keys.children, keys.patterns, keys.id, ...events), asked);
  }

  /**
   * closeBatch: its callbacks on record as enqueued (`recorded`: now, by this call), with those that settled
   * already (their deduplication guards can go); its keys expire once every callback settled, `keep` ms later.
   */
  async close(keys: BatchKeys, callbackIds: readonly string[]): Promise<{ recorded: boolean; settled: string[] }> {
    const [code, ...settled] = await this.redis.closeBatch(
      keys.record,
      keys.children,
      keys.patterns,
      callbackIds.join(','),
    );
    return { recorded: code === 1, settled: settled.map(String) };
  }

  /** cancelBatch: the batch cancelled; its state before ('unknown': no record) and the patterns of its tasks. */
  async cancel(keys: BatchKeys): Promise<{ before: string; patterns: string[] }> {
    const [before, ...patterns] = await this.redis.cancelBatch(keys.record, keys.children, keys.patterns);
    return { before, patterns };
  }

  /** dropHeld: a running task of batch `batch` taken from its worker through its fence; false when not held. */
  async dropHeld(queue: QueueKeys, workerId: string, token: string, batch: string): Promise<boolean> {
    return (await this.redis.dropHeld(queue.processing(workerId), ...settleKeys(queue), token, batch)) === 1;
  }

  /** trimBatchEvents: the folded events dropped, if they are still the list's head. */
  async trim(events: string, folded: readonly string[]): Promise<boolean> {
    return (await this.redis.trimBatchEvents(events, folded.length, folded[0], folded[folded.length - 1])) === 1;
  }
}

function fireAnswer(reply: (number | string)[], asked: number): FireAnswer {
  if (reply[0] === -1) return { kind: 'unknown' };
  if (reply[0] === 2) return { kind: 'done', created: String(reply[1]) };
  if (reply[0] !== 1) return { kind: 'none' };
  const [, complete, success, total, succeeded, dead, cancelled, created, ...failedIds] = reply;
  return {
    kind: 'fire',
    asked,
    complete: JSON.parse(String(complete)) as BatchCallback,
    success: success === '' ? undefined : (JSON.parse(String(success)) as BatchCallback),
    total: Number(total),
    succeeded: Number(succeeded),
    dead: Number(dead),
    cancelled: Number(cancelled),
    created: String(created),
    failedIds: failedIds.map(String),
  };
}
