import { describe, expect, it } from '@jest/globals';
import { InvalidOptionError } from '../../lib/index.js';
import { resolveOutboxOptions } from '../../lib/core/outbox/outbox-options.js';
import { outboxSql } from '../../lib/core/outbox/outbox-sql.js';

describe('outbox options', () => {
  it('completes the defaults', () => {
    expect(resolveOutboxOptions(undefined)).toMatchObject({
      table: 'redis_task_outbox',
      relay: true,
      batchSize: 200,
      pollMs: 500,
      listen: true,
      relayRecordMs: 86_400_000,
    });
  });

  it.each([
    [{ table: 'x; DROP TABLE users' }, 'outbox.table'],
    [{ table: 'a.b.c' }, 'outbox.table'],
    [{ batchSize: 0 }, 'outbox.batchSize'],
    [{ batchSize: 1.5 }, 'outbox.batchSize'],
    [{ pollMs: 5 }, 'outbox.pollMs'],
    [{ relay: 'yes' }, 'outbox.relay'],
    [{ listen: 1 }, 'outbox.listen'],
    [{ dialect: 'sqlite' }, 'outbox.dialect'],
    [{ executor: { query: () => undefined } }, 'outbox.executor'],
    [{ relayRecordMs: 1_000 }, 'outbox.relayRecordMs'],
  ])('refuses %j, naming %s', (options, option) => {
    let thrown: unknown;
    try {
      resolveOutboxOptions(options as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidOptionError);
    expect((thrown as InvalidOptionError).option).toBe(option);
  });

  it('takes a schema-qualified table, and names its NOTIFY channel after it', () => {
    expect(resolveOutboxOptions({ table: 'app.outbox' }).table).toBe('app.outbox');
    expect(outboxSql('postgres', 'app.outbox').channel).toBe('app_outbox_relay');
    expect(outboxSql('mysql', 'app.outbox').channel).toBeUndefined();
  });
});
