import { InvalidOptionError } from '../model/errors.js';
import { describe } from '../support/describe.js';

/** The SQL dialect of the outbox table: PostgreSQL, or MySQL/MariaDB. */
export type OutboxDialect = 'postgres' | 'mysql';

/**
 * Runs SQL on a transaction object of your ORM, for ORMs without a built-in executor (TypeORM and Drizzle
 * have one): `query` runs `sql` (placeholders `$1`, `$2`... on PostgreSQL, `?` on MySQL) with `params` on
 * `tx` and resolves with the rows; `transaction` runs `work` in a new transaction of `base` (the ORM's
 * non-transactional instance) and commits when it resolves.
 */
export interface OutboxExecutor {
  readonly dialect: OutboxDialect;
  query(tx: unknown, sql: string, params: readonly unknown[]): Promise<Record<string, unknown>[]>;
  transaction<T>(base: unknown, work: (tx: unknown) => Promise<T>): Promise<T>;
}

/** Options of `RedisTaskOutboxModule.forRoot`. */
export interface RedisTaskOutboxOptions {
  /**
   * `outbox` (the default): a transaction's tasks are rows of the outbox table, written in it and relayed
   * once committed: nothing lost. `after-commit`: no table; a transaction's tasks are sent to Redis right
   * after it committed, and are lost if the process dies (or Redis refuses them) in between (README).
   */
  readonly mode?: 'outbox' | 'after-commit';
  /** The outbox table (see the shipped migrations); default `redis_task_outbox`. */
  readonly table?: string;
  /** The `@nestjs-cls/transactional` connection name, when the app registers more than one. */
  readonly connectionName?: string;
  /**
   * The SQL dialect; default: read from the ORM (TypeORM's `type`, Drizzle's dialect). Needed with a custom
   * `executor` only when it does not say.
   */
  readonly dialect?: OutboxDialect;
  /** Runs the outbox's SQL for ORMs other than TypeORM and Drizzle (Knex, Kysely, Prisma, your own). */
  readonly executor?: OutboxExecutor;
  /** Run the relay in this process (moves committed rows to Redis); default true. Any number may run. */
  readonly relay?: boolean;
  /** Rows claimed per relay transaction; default 200 (1 to 5,000). */
  readonly batchSize?: number;
  /**
   * Longest wait between two looks at the table when nothing woke the relay (ms); default 500. PostgreSQL
   * wakes relays at every commit (LISTEN/NOTIFY, unless `listen` is false); this process's own emits wake
   * its relay on every database.
   */
  readonly pollMs?: number;
  /** PostgreSQL: hold one connection of the ORM's pool to LISTEN for commits; default true. */
  readonly listen?: boolean;
  /**
   * How long Redis remembers that a row was relayed when the relay cannot confirm that its delete committed
   * (ms; default one day): a row relayed again within it writes nothing. Once the delete committed, 10 s.
   */
  readonly relayRecordMs?: number;
}

export interface ResolvedOutboxOptions {
  readonly mode: 'outbox' | 'after-commit';
  readonly table: string;
  readonly connectionName?: string;
  readonly dialect?: OutboxDialect;
  readonly executor?: OutboxExecutor;
  readonly relay: boolean;
  readonly batchSize: number;
  readonly pollMs: number;
  readonly listen: boolean;
  readonly relayRecordMs: number;
}

/** Table names: a letter or underscore, then letters, digits, underscores; an optional schema the same way. */
const TABLE = /^(?:[A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$/;

function integer(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidOptionError(`outbox.${name}`, `must be an integer from ${min} to ${max}, got ${describe(value)}`);
  }
  return value;
}

function flag(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean')
    throw new InvalidOptionError(`outbox.${name}`, `must be a boolean, got ${describe(value)}`);
  return value;
}

/** The outbox's options checked and completed; a bad one fails here, named. */
export function resolveOutboxOptions(options: RedisTaskOutboxOptions | undefined): ResolvedOutboxOptions {
  const given = options ?? {};
  if (typeof given !== 'object') throw new InvalidOptionError('outbox', `must be an object, got ${describe(given)}`);
  const table = given.table ?? 'redis_task_outbox';
  if (typeof table !== 'string' || !TABLE.test(table)) {
    throw new InvalidOptionError(
      'outbox.table',
      `must be a table name ([schema.]name: letters, digits, _), got ${describe(table)}`,
    );
  }
  if (given.dialect !== undefined && given.dialect !== 'postgres' && given.dialect !== 'mysql') {
    throw new InvalidOptionError('outbox.dialect', `must be 'postgres' or 'mysql', got ${describe(given.dialect)}`);
  }
  const executor = given.executor;
  if (
    executor !== undefined &&
    (typeof executor !== 'object' || typeof executor.query !== 'function' || typeof executor.transaction !== 'function')
  ) {
    throw new InvalidOptionError('outbox.executor', 'must have query(tx, sql, params) and transaction(base, work)');
  }
  if (given.connectionName !== undefined && typeof given.connectionName !== 'string') {
    throw new InvalidOptionError('outbox.connectionName', `must be a string, got ${describe(given.connectionName)}`);
  }
  if (given.mode !== undefined && given.mode !== 'outbox' && given.mode !== 'after-commit') {
    throw new InvalidOptionError('outbox.mode', `must be 'outbox' or 'after-commit', got ${describe(given.mode)}`);
  }
  return {
    mode: given.mode ?? 'outbox',
    table,
    connectionName: given.connectionName,
    dialect: given.dialect ?? executor?.dialect,
    executor,
    relay: flag('relay', given.relay, true),
    batchSize: integer('batchSize', given.batchSize, 200, 1, 5_000),
    pollMs: integer('pollMs', given.pollMs, 500, 10, 3_600_000),
    listen: flag('listen', given.listen, true),
    relayRecordMs: integer('relayRecordMs', given.relayRecordMs, 86_400_000, 60_000, 30 * 86_400_000),
  };
}
