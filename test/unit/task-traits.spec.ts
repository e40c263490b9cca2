import { describe, expect, it } from '@jest/globals';
import { decodeEntry, type TaskEnvelope } from '../../lib/core/model/codec.js';
import {
  TRAIT_CONFLICTS,
  TRAIT_ORDER,
  TRAIT_RULES,
  hasTrait,
  revokerOf,
  ridesOnClaim,
  startStep,
  type TaskTrait,
} from '../../lib/core/model/task-traits.js';
import { prepareTask, type EnqueueItem } from '../../lib/core/producer/task-items.js';

const limits = { maxPayloadBytes: 1_000_000, deduplicationTtlMs: 60_000, outOfLineBytes: 100 };

/** The enqueue options that ask for each trait. */
const ASKS: Record<TaskTrait, Partial<EnqueueItem>> = {
  reply: { replyTo: 'chan' },
  dedup: { deduplicationKey: 'd1' },
  tracked: { track: true },
  coalesced: { coalesce: { key: 'k1' } },
  batch: { batch: 'b1' },
  flow: { flow: 'f1', node: 'n1' },
  // Not asked for: a payload over the client's outOfLineBytes (100 here).
  body: { payload: 'x'.repeat(200) },
};

/** A task asking for `traits`, prepared and read back as a worker reads it. */
function envelopeOf(...traits: TaskTrait[]): TaskEnvelope {
  const item = Object.assign({ id: 't1', clientId: 'a', payload: 1 }, ...traits.map((trait) => ASKS[trait]));
  const prepared = prepareTask(item as EnqueueItem, Date.now(), undefined, limits);
  const decoded = decodeEntry(prepared.entry);
  if (!decoded.ok) throw new Error(`undecodable: ${prepared.entry}`);
  return decoded.entry.envelope;
}

describe('task traits: what a task needs, said once', () => {
  it('reads each trait back from the stored envelope the producer wrote', () => {
    for (const trait of Object.keys(ASKS) as TaskTrait[]) {
      const envelope = envelopeOf(trait);
      expect([trait, hasTrait(envelope, trait)]).toEqual([trait, true]);
      expect([trait, hasTrait(envelopeOf(), trait)]).toEqual([trait, false]);
    }
  });

  it('lets a plain or tracked success ride on the next claim call, no other', () => {
    expect(ridesOnClaim(envelopeOf())).toBe(true);
    for (const trait of Object.keys(ASKS) as TaskTrait[])
      expect([trait, ridesOnClaim(envelopeOf(trait))]).toEqual([trait, trait === 'tracked']);
    // A deduplication key kept its whole TTL has nothing to free on success.
    const kept = prepareTask(
      { id: 't1', clientId: 'a', payload: 1, deduplicationKey: 'd', deduplicationKeepAfterSuccess: true },
      Date.now(),
      undefined,
      limits,
    );
    const decoded = decodeEntry(kept.entry);
    expect(decoded.ok && ridesOnClaim(decoded.entry.envelope)).toBe(true);
  });

  it('names the start step and the revoker of each feature', () => {
    expect([startStep(envelopeOf()), startStep(envelopeOf('tracked')), startStep(envelopeOf('coalesced'))]).toEqual([
      undefined,
      'startTasks',
      'startCoalesced',
    ]);
    const superseding = prepareTask(
      { id: 't1', clientId: 'a', payload: 1, coalesce: { key: 'k', mode: 'supersede' } },
      Date.now(),
      undefined,
      limits,
    );
    const decoded = decodeEntry(superseding.entry);
    expect(decoded.ok && revokerOf(decoded.entry.envelope)).toBe('supersede');
    expect([
      revokerOf(envelopeOf()),
      revokerOf(envelopeOf('coalesced')),
      revokerOf(envelopeOf('batch')),
      revokerOf(envelopeOf('tracked')),
    ]).toEqual([undefined, undefined, 'batch-cancel', 'cancel']);
  });

  it('answers the per-task questions (written out for speed) as the table does, for every task the producer makes', () => {
    const traits = Object.keys(ASKS) as TaskTrait[];
    const subsets = traits.reduce<TaskTrait[][]>((all, trait) => [...all, ...all.map((set) => [...set, trait])], [[]]);
    const allowed = subsets.filter((set) => !TRAIT_CONFLICTS.some(([a, b]) => set.includes(a) && set.includes(b)));
    expect(allowed.length).toBeGreaterThan(8);
    for (const set of allowed) {
      const envelope = envelopeOf(...set);
      const rides = !TRAIT_ORDER.some(
        (trait) => TRAIT_RULES[trait].settlesOnItsOwn && TRAIT_RULES[trait].has(envelope),
      );
      const start = TRAIT_ORDER.map((trait) => TRAIT_RULES[trait]).find(
        (rule) => rule.start && rule.has(envelope),
      )?.start;
      expect([set, ridesOnClaim(envelope), startStep(envelope)]).toEqual([set, rides, start]);
    }
  });

  it.each(TRAIT_CONFLICTS.map(([a, b, why]) => [a, b, why] as const))(
    'refuses a task that is both %s and %s, saying why',
    (a: TaskTrait, b: TaskTrait, why: string) => {
      expect(() => envelopeOf(a, b)).toThrow(why);
    },
  );

  it('accepts every pair of traits the conflicts table does not name', () => {
    const traits = Object.keys(ASKS) as TaskTrait[];
    const named = new Set(TRAIT_CONFLICTS.flatMap(([a, b]) => [`${a}+${b}`, `${b}+${a}`]));
    const allowed = traits.flatMap((a, i) => traits.slice(i + 1).map((b) => [a, b] as const));
    for (const [a, b] of allowed.filter(([a, b]) => !named.has(`${a}+${b}`))) {
      const envelope = envelopeOf(a, b);
      // Not refused, but not both: a coalesced task keeps a large payload in its entry (a newer emit replaces
      // the entry inside a script).
      const both = !(a === 'coalesced' && b === 'body');
      expect([a, b, hasTrait(envelope, a), hasTrait(envelope, b)]).toEqual([a, b, true, both]);
    }
  });
});
