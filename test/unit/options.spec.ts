import { describe, expect, it } from '@jest/globals';
import { InvalidOptionError, RedisTaskClient, RedisTaskTransport } from '../../lib/index.js';

describe('options are validated at construction', () => {
  it.each([
    [{ concurrency: 0 }, 'concurrency'],
    [{ concurrency: 1.5 }, 'concurrency'],
    [{ concurrency: '4' }, 'concurrency'],
    [{ prefetch: -1 }, 'prefetch'],
    [{ prefix: '' }, 'prefix'],
    [{ prefix: 'a{b}' }, 'prefix'],
    [{ workerId: 'has space' }, 'workerId'],
    [{ connection: 'http://localhost:6379' }, 'connection'],
    [{ connection: 42 }, 'connection'],
    [{ shutdownTimeoutMs: -5 }, 'shutdownTimeoutMs'],
    [{ concurency: 4 }, 'concurency'],
    [{ shards: 0 }, 'shards'],
    [{ shards: 257 }, 'shards'],
    [{ watchdogTimeoutMs: 10 }, 'watchdogTimeoutMs'],
    [{ patternConcurrency: 2 }, 'patternConcurrency'],
    [{ patternConcurrency: { 'video.encode': 0 } }, 'patternConcurrency["video.encode"]'],
    [{ patternConcurrency: { 'video.encode': 11 } }, 'patternConcurrency["video.encode"]'],
    [{ concurrency: 4, patternConcurrency: { 'video.encode': 5 } }, 'patternConcurrency["video.encode"]'],
    [{ concurrency: 4, idleSlots: 4 }, 'idleSlots'],
    [{ idleSlots: -1 }, 'idleSlots'],
    [{ maxRuntimeMs: -1 }, 'maxRuntimeMs'],
    [{ stepAttempts: 0 }, 'stepAttempts'],
    [{ stepAttempts: 2.5 }, 'stepAttempts'],
  ])('the transport rejects %j naming "%s"', (options, option) => {
    const attempt = () => new RedisTaskTransport(options as never);
    expect(attempt).toThrow(InvalidOptionError);
    expect(attempt).toThrow(`option "${option}"`);
  });

  it.each([
    [{ clientId: '' }, 'clientId'],
    [{ clientId: 'tab\there' }, 'clientId'],
    [{ maxPayloadBytes: 0 }, 'maxPayloadBytes'],
    [{ replyTimeoutMs: 'soon' }, 'replyTimeoutMs'],
    [{ connection: { nodes: 'x' } }, 'connection.nodes'],
    [{ workerId: 'w1' }, 'workerId'],
    [{ shards: 2.5 }, 'shards'],
    [{ durability: true }, 'durability'],
    [{ durability: { replicas: 0, timeoutMs: 100 } }, 'durability.replicas'],
    [{ durability: { replicas: 1 } }, 'durability.timeoutMs'],
    [{ durability: { replicas: 1, timeoutMs: 100, fsync: true } }, 'durability.fsync'],
  ])('the client rejects %j naming "%s"', (options, option) => {
    const attempt = () => new RedisTaskClient(options as never);
    expect(attempt).toThrow(InvalidOptionError);
    expect(attempt).toThrow(`option "${option}"`);
  });

  it.each(['serializer', 'deserializer'])(
    "refuses Nest's %s option on the transport and the client (the stored form is fixed)",
    (option) => {
      const codec = { serialize: (value: unknown) => value, deserialize: (value: unknown) => value };
      for (const attempt of [
        () => new RedisTaskTransport({ [option]: codec } as never),
        () => new RedisTaskClient({ [option]: codec } as never),
      ]) {
        expect(attempt).toThrow(InvalidOptionError);
        expect(attempt).toThrow(`option "${option}" is not supported`);
      }
    },
  );

  it('fills documented defaults', () => {
    const transport = new RedisTaskTransport();
    expect(transport.options).toMatchObject({
      connection: 'redis://127.0.0.1:6379',
      prefix: 'tasks',
      concurrency: 10,
      prefetch: 5,
    });
    expect(new RedisTaskTransport({ concurrency: 64 }).options.prefetch).toBe(32);
    expect(new RedisTaskTransport({ concurrency: 64, prefetch: 4 }).options.prefetch).toBe(4);
    expect(transport.options.workerId).toMatch(/:\d+:[0-9a-f]{8}$/);
    expect(new RedisTaskClient().options).toMatchObject({ clientId: 'default', prefix: 'tasks' });
  });
});

describe('where Redis is: one rule for transport and client', () => {
  const saved = process.env.REDIS_URL;
  const restore = () => {
    if (saved === undefined) delete process.env.REDIS_URL;
    else process.env.REDIS_URL = saved;
  };

  it('takes the connection option, else REDIS_URL, else redis://127.0.0.1:6379', () => {
    try {
      process.env.REDIS_URL = 'redis://cache.internal:6380';
      expect(new RedisTaskClient().options.connection).toBe('redis://cache.internal:6380');
      expect(new RedisTaskTransport().options.connection).toBe('redis://cache.internal:6380');
      expect(new RedisTaskClient({ connection: 'redis://other:1' }).options.connection).toBe('redis://other:1');
      delete process.env.REDIS_URL;
      expect(new RedisTaskTransport().options.connection).toBe('redis://127.0.0.1:6379');
    } finally {
      restore();
    }
  });

  it('names REDIS_URL, without its password, when it is not a Redis URL', () => {
    try {
      process.env.REDIS_URL = 'http://ops:hunter2@cache.internal';
      expect(() => new RedisTaskClient()).toThrow(
        /option "REDIS_URL \(environment\)" must be a redis:\/\/ or rediss:\/\/ URL, got "http:\/\/ops:\*\*\*@cache.internal"/,
      );
    } finally {
      restore();
    }
  });
});
