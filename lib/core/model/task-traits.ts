import type { TaskEnvelope } from './codec.js';
import { COALESCE_MODE_CODES } from './codec.js';

/**
 * What a task needs beyond a plain run, said once per feature: the one table the producer, the completer,
 * the runner and the lease ask (ARCHITECTURE.md, "Adding a per-task feature"). Its Redis side is the seam
 * of the Lua scripts, include/follow.lua.
 *
 * - reply: a `send()` caller waits for the result.
 * - dedup: a deduplication key, freed when the task ends (on success only unless kept its whole TTL).
 * - tracked: an index (`getTask`, cancel, progress) follows each move.
 * - coalesced: a coalescing key's record follows each move (latest wins).
 * - batch: its batch hears each settle.
 * - flow: its flow hears each settle (with its result), and releases the nodes that wait for it.
 * - body: its payload is stored out of line (read after the claim, deleted when the task ends).
 */
export type TaskTrait = 'reply' | 'dedup' | 'tracked' | 'coalesced' | 'batch' | 'flow' | 'body';

/** What the producer is asked for: the options of an enqueue item that make traits. */
export interface TraitRequest {
  readonly replyTo?: string;
  readonly deduplicationKey?: string;
  readonly track?: unknown;
  readonly coalesce?: unknown;
  readonly batch?: string;
  readonly flow?: string;
}

/** The worker-side step a task needs between its claim and its handler (a Lua script of its feature). */
export type StartStep = 'startCoalesced' | 'startTasks';

/** Who may take a running task's token away, and so what the lease asks when it finds the token gone. */
export type Revoker = 'supersede' | 'batch-cancel' | 'cancel';

export interface TraitRule {
  /** Whether an enqueue item asks for the trait. */
  readonly asked: (request: TraitRequest) => boolean;
  /** Whether a stored task has the trait, read from its envelope. */
  readonly has: (envelope: TaskEnvelope) => boolean;
  /** A success must be settled by `ackTasks` (a record to write): it cannot ride on the next claim call. */
  readonly settlesOnItsOwn: boolean;
  /** Its step before the handler, if any. */
  readonly start?: StartStep;
  /** Who may revoke a running task of it (only where the envelope says so). */
  readonly revoker?: (envelope: TaskEnvelope) => Revoker | undefined;
}

// table-ok: a constant, one row per feature
export const TRAIT_RULES: Readonly<Record<TaskTrait, TraitRule>> = {
  reply: {
    asked: (request) => request.replyTo !== undefined,
    has: (envelope) => envelope.replyTo !== undefined,
    settlesOnItsOwn: true,
  },
  dedup: {
    asked: (request) => request.deduplicationKey !== undefined,
    // Freed on success unless kept its whole TTL: only then does a success have a key to free.
    has: (envelope) => envelope.dedupKey !== undefined && envelope.dedupKeep !== 1,
    settlesOnItsOwn: true,
  },
  tracked: {
    asked: (request) => request.track !== undefined && request.track !== false,
    has: (envelope) => envelope.track === 1,
    // Its index becomes `completed` in the claim call its success rides on (claimTasks: trackFollow's `completed`).
    settlesOnItsOwn: false,
    start: 'startTasks',
    revoker: () => 'cancel',
  },
  coalesced: {
    asked: (request) => request.coalesce !== undefined,
    has: (envelope) => envelope.coalesce !== undefined,
    settlesOnItsOwn: true,
    start: 'startCoalesced',
    revoker: (envelope) => (envelope.coalesceMode === COALESCE_MODE_CODES.supersede ? 'supersede' : undefined),
  },
  batch: {
    asked: (request) => request.batch !== undefined,
    has: (envelope) => envelope.batch !== undefined,
    settlesOnItsOwn: true,
    revoker: () => 'batch-cancel',
  },
  flow: {
    asked: (request) => request.flow !== undefined,
    has: (envelope) => envelope.flow !== undefined,
    // Its result goes to its flow with the acknowledgement.
    settlesOnItsOwn: true,
    // A node is tracked (its flow's cancel stops it by id), so the tracked row says the rest.
    revoker: () => 'cancel',
  },
  body: {
    // Never asked for: the producer decides by the payload's size (the client's `outOfLineBytes`).
    asked: () => false,
    has: (envelope) => envelope.body !== undefined,
    // Its body is deleted with the acknowledgement (scripts/include/body.lua, through the seam).
    settlesOnItsOwn: true,
  },
};

/** Every trait, in the order their start steps and revokers are asked (a task has at most one of the last three). */
export const TRAIT_ORDER: readonly TaskTrait[] = ['coalesced', 'batch', 'flow', 'tracked', 'reply', 'dedup', 'body'];

/**
 * Traits a task cannot have together, each with why: the producer refuses the item with the reason (an
 * InvalidTaskError naming the item). A new feature adds a row against each trait it cannot live with.
 */
export const TRAIT_CONFLICTS: readonly (readonly [TaskTrait, TaskTrait, string])[] = [
  [
    'coalesced',
    'dedup',
    'a task takes a coalescing key or a deduplication key, not both (a coalescing key already keeps one task per key)',
  ],
  [
    'coalesced',
    'tracked',
    'a task with a coalescing key cannot be tracked (a newer emit may replace it before it runs)',
  ],
  ['batch', 'coalesced', 'a task of a batch cannot have a coalescing key (a newer emit could replace it)'],
  ['batch', 'dedup', 'a task of a batch cannot have a deduplication key (it could be refused)'],
  ['batch', 'tracked', 'a task of a batch cannot be tracked (getBatch tells where they are)'],
  ['batch', 'reply', 'a task of a batch is emitted, not sent: its batch hears its outcome'],
  ['flow', 'coalesced', 'a node of a flow cannot have a coalescing key (a newer emit could replace it)'],
  ['flow', 'dedup', 'a node of a flow cannot have a deduplication key (its flow releases it once already)'],
  ['flow', 'batch', 'a node of a flow cannot be a task of a batch (its flow tells where it is)'],
  ['flow', 'reply', 'a node of a flow is released by its flow, not sent: its flow hears its outcome'],
];

/** The traits named first in a conflict row: an item asking for none of them has no conflict (the common case). */
const CONFLICT_FIRSTS: readonly TaskTrait[] = [...new Set(TRAIT_CONFLICTS.map(([a]) => a))];
/** The traits that conflict with tracking. */
const UNTRACKABLE: readonly TaskTrait[] = TRAIT_CONFLICTS.flatMap(([a, b]) =>
  a === 'tracked' ? [b] : b === 'tracked' ? [a] : [],
);

/** The first conflict among the traits an item asks for: its reason, or undefined. */
export function traitConflict(request: TraitRequest): string | undefined {
  if (!CONFLICT_FIRSTS.some((trait) => TRAIT_RULES[trait].asked(request))) return undefined;
  for (const [a, b, why] of TRAIT_CONFLICTS) {
    if (TRAIT_RULES[a].asked(request) && TRAIT_RULES[b].asked(request)) return why;
  }
  return undefined;
}

/** Whether a client's default tracking applies to an item: not to a task whose traits conflict with it. */
export function mayBeTracked(request: TraitRequest): boolean {
  return !UNTRACKABLE.some((trait) => TRAIT_RULES[trait].asked(request));
}

/** Whether a stored task has `trait`. */
export function hasTrait(envelope: TaskEnvelope, trait: TaskTrait): boolean {
  return TRAIT_RULES[trait].has(envelope);
}

// The two questions asked of every task (its start, its success) are written out from the table above, not
// looped over it: a loop over the rules cost a tenth of the drain rate at concurrency 64 (measured, 123k -> 110k
// tasks/s). test/unit/task-traits.spec.ts checks each agrees with the table for every task the producer makes.

/** Whether a success of this task may ride on its shard's next claim call (no trait settles on its own). */
export function ridesOnClaim(envelope: TaskEnvelope): boolean {
  return (
    envelope.replyTo === undefined &&
    (envelope.dedupKey === undefined || envelope.dedupKeep === 1) &&
    envelope.coalesce === undefined &&
    envelope.batch === undefined &&
    envelope.flow === undefined &&
    envelope.body === undefined
  );
}

/** The step this task needs before its handler, if any. */
export function startStep(envelope: TaskEnvelope): StartStep | undefined {
  if (envelope.coalesce !== undefined) return 'startCoalesced';
  return envelope.track === 1 ? 'startTasks' : undefined;
}

/** Who may have revoked this running task's token (undefined: nobody; a lost token is a lost lease). */
export function revokerOf(envelope: TaskEnvelope): Revoker | undefined {
  for (const trait of TRAIT_ORDER) {
    const revoker = TRAIT_RULES[trait].revoker;
    if (revoker !== undefined && TRAIT_RULES[trait].has(envelope)) return revoker(envelope);
  }
  return undefined;
}
