import { describe, expect, it } from '@jest/globals';
import {
  decodeEntry,
  encodeEntry,
  encodeNewEntry,
  FORMAT_VERSION_2,
  FORMAT_VERSION,
} from '../../lib/core/model/codec.js';
import { encodeQueueName, QueueKeys } from '../../lib/core/redis/keys.js';

describe('task entries', () => {
  it('round-trips an envelope with its attempt count', () => {
    const envelope = { id: 'x', clientId: 'c', payload: { a: [1, 2] }, enqueuedAt: 5, replyTo: 'ch' };
    expect(decodeEntry(encodeEntry(envelope, 3))).toEqual({
      ok: true,
      entry: { attempts: 3, envelope: { v: FORMAT_VERSION, ...envelope } },
    });
  });

  it('encodes a fresh entry identically whether or not the payload was pre-serialized', () => {
    const meta = { id: 'x', clientId: 'c', enqueuedAt: 5 };
    const decoded = decodeEntry(encodeNewEntry(meta, JSON.stringify({ n: 1 })));
    expect(decoded).toEqual({
      ok: true,
      entry: { attempts: 0, envelope: { v: FORMAT_VERSION, ...meta, payload: { n: 1 } } },
    });
  });

  it.each([
    ['not json', 'no attempt count'],
    ['0|{broken', 'not valid JSON'],
    ['0|[1,2]', 'not a JSON object'],
    ['0|{"clientId":"c","enqueuedAt":1,"payload":1}', '"id"'],
    ['0|{"id":"x","enqueuedAt":1,"payload":1}', '"clientId"'],
    ['0|{"id":"x","clientId":"c","payload":1}', '"enqueuedAt"'],
    ['0|{"id":"x","clientId":"c","enqueuedAt":1}', '"payload"'],
    ['0|{"id":"x","clientId":"c","enqueuedAt":1,"payload":1,"replyTo":7}', '"replyTo"'],
    ['0|{"v":"1","id":"x","clientId":"c","enqueuedAt":1,"payload":1}', '"v" (format version)'],
    ['0|{"v":0,"id":"x","clientId":"c","enqueuedAt":1,"payload":1}', '"v" (format version)'],
  ])('reports %s as malformed (%s)', (raw, reason) => {
    const decoded = decodeEntry(raw);
    expect(decoded.ok).toBe(false);
    expect(decoded.ok ? '' : decoded.reason).toContain(reason);
    expect(decoded.ok ? 'ok' : decoded.version).toBeUndefined();
  });

  it('writes its format version first in every entry, and reads entries without one as version 1', () => {
    expect(encodeNewEntry({ id: 'x', clientId: 'c', enqueuedAt: 5 }, '1')).toMatch(
      new RegExp(`^0\\|\\{"v":${FORMAT_VERSION},"id":"x"`),
    );
    expect(decodeEntry('2|{"id":"old","clientId":"c","enqueuedAt":1,"payload":null}')).toMatchObject({
      ok: true,
      entry: { attempts: 2 },
    });
  });

  it('refuses an entry of another format version, saying which, rather than guess at it', () => {
    const decoded = decodeEntry('0|{"v":3,"id":"x","clientId":"c","enqueuedAt":1,"payload":1}');
    expect(decoded).toEqual({
      ok: false,
      version: 3,
      reason: `the entry is in format version 3; this worker reads versions ${FORMAT_VERSION} and ${FORMAT_VERSION_2}`,
    });
  });
});

describe('queue keys', () => {
  it('puts every key of a queue under one hash tag', () => {
    const keys = new QueueKeys('tasks', 'avatar.resize');
    const all = [
      keys.ring,
      keys.workers,
      keys.sequence,
      keys.deadLetters,
      keys.pending('c'),
      keys.processing('w'),
      keys.result('t'),
    ];
    // The prefix stands outside the tag, so one ACL pattern `~tasks:*` covers every key.
    const tags = all.map((key) => /^tasks:\{([^}]*)\}/.exec(key)?.[1]);
    expect(new Set(tags)).toEqual(new Set(['avatar.resize']));
  });

  it('encodes braces in patterns so they cannot move keys to another slot', () => {
    expect(encodeQueueName('{"cmd":"sum"}')).toBe('%7B"cmd":"sum"%7D');
    const keys = new QueueKeys('tasks', 'a}b');
    expect(/^tasks:\{([^}]*)\}/.exec(keys.ring)?.[1]).toBe('a%7Db');
  });
});
