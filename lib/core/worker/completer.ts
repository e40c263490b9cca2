import type { TaskEnvelope } from '../model/codec.js';
import type { QueueKeys } from '../redis/keys.js';
import type { SettleOptions } from '../redis/requeue.js';
import type { AckBatch } from './turn-batch.js';
import { ClaimAcks } from './claim-acks.js';
import { ridesOnClaim } from '../model/task-traits.js';
import type { ClaimedTask } from './claimed-task.js';

/**
 * Every success of a worker goes through here, and only here. A plain task (no reply, no deduplication
 * key) rides on its shard's next claim call: its token joins the shard's `ClaimAcks`, which the shard's
 * claim loop takes with each call; its caller hears the outcome through `answer`. Any other success, or one
 * whose shard has no claim loop (or after shutdown gave the tasks back), joins this event-loop turn's
 * `ackTasks` call (`AckBatch`). The lease asks here which tokens are still held for acknowledgements not
 * yet sent; shutdown tells it the tasks were given back (`release`), after which nothing rides.
 */
export class Completer {
  // table-ok: one entry per queue shard, made when its claim loop is
  private readonly shards = new Map<QueueKeys, ClaimAcks>();
  private given = false;

  constructor(
    private readonly batch: Pick<AckBatch, 'add'>,
    private readonly options: Pick<SettleOptions, 'workerId' | 'resultTtlMs'>,
  ) {}

  /** The acknowledgements riding on a shard's claim calls (its claim loop takes them, and listens for new ones). */
  shard(keys: QueueKeys): ClaimAcks {
    let acks = this.shards.get(keys);
    if (!acks) {
      acks = new ClaimAcks();
      this.shards.set(keys, acks);
    }
    return acks;
  }

  /**
   * A plain (or only tracked) success rides on its shard's next claim call: true, and `answer` hears whether the worker still
   * held the task once the call came back. False when it cannot ride (a trait of the task settles on its own:
   * model/task-traits.ts; no claim loop, or the tasks were given back): `acknowledge` it instead.
   */
  ride(task: ClaimedTask, envelope: TaskEnvelope, answer: (held: boolean) => void): boolean {
    if (this.given || !ridesOnClaim(envelope)) return false;
    const acks = this.shards.get(task.keys);
    if (!acks?.rides) return false;
    acks.add(task.token, answer, envelope.track === 1 ? trackedAck(envelope.id, task.keepOfIndex) : undefined);
    return true;
  }

  /**
   * A success in this turn's `ackTasks` call (one per worker and shard, each fenced on its own token): the
   * task leaves Redis, a `send()` caller gets `reply` (already JSON), its deduplication key is freed.
   * Resolves true once Redis removed it, false when the worker no longer held it (lease lost).
   */
  acknowledge(task: ClaimedTask, envelope: TaskEnvelope, reply?: string): Promise<boolean> {
    return this.batch.add(task.keys, this.options.workerId, {
      token: task.token,
      taskId: envelope.id,
      deduplicationKey: freedOnSuccess(envelope),
      // A node of a flow hands its result to its flow (no channel: nobody listens).
      reply:
        reply === undefined
          ? undefined
          : envelope.replyTo !== undefined
            ? { channel: envelope.replyTo, message: reply }
            : envelope.flow !== undefined
              ? { channel: '', message: reply }
              : undefined,
      resultTtlMs: this.options.resultTtlMs,
      tracked: task.tracked(envelope),
    });
  }

  /** Tokens of a shard whose acknowledgement is queued or on its way: still held in Redis, still running. */
  unacknowledged(keys: QueueKeys): string[] {
    return this.shards.get(keys)?.unacknowledged ?? [];
  }

  /** Shutdown gave the unfinished tasks back: late outcomes are not settled, nothing rides any more. */
  release(): void {
    this.given = true;
  }

  /** Whether shutdown gave the tasks back. */
  get released(): boolean {
    return this.given;
  }

  /** Set when the worker begins to shut down: runs with durable steps give their tasks back at their next step boundary. */
  stopping = false;
}

/** The deduplication key a success frees: none when the task keeps it for its TTL (`dedupKeep`). */
function freedOnSuccess(envelope: TaskEnvelope): string | undefined {
  return envelope.dedupKeep === 1 ? undefined : envelope.dedupKey;
}

/** What a tracked success sends after its token: its id, and the keep of its index when its claim recorded it running. */
function trackedAck(id: string, keep: string | undefined): string {
  return keep === undefined ? id : `${id}\t${keep}`;
}
