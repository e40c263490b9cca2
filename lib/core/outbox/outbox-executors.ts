import type { OutboxDialect, OutboxExecutor } from './outbox-options.js';
import { mysqlDriverExecutor, postgresDriverExecutor } from './driver-executors.js';

/**
 * The built-in executors: the outbox's SQL run on the transaction objects of TypeORM (an `EntityManager`)
 * and Drizzle (a database or transaction of `drizzle-orm/node-postgres` or `drizzle-orm/mysql2`), found by
 * the object's shape, so the ORMs stay optional peers this module never imports statically.
 */

type Rows = Record<string, unknown>[];

interface TypeOrmManager {
  query(sql: string, params?: unknown[]): Promise<unknown>;
  transaction<T>(isolation: string, work: (manager: TypeOrmManager) => Promise<T>): Promise<T>;
  readonly dataSource?: {
    readonly options: { readonly type: string };
    readonly driver?: { readonly master?: unknown };
  };
  readonly connection?: {
    readonly options: { readonly type: string };
    readonly driver?: { readonly master?: unknown };
  };
}

interface DrizzleDatabase {
  execute(query: unknown): Promise<unknown>;
  transaction<T>(work: (tx: DrizzleDatabase) => Promise<T>, config?: { isolationLevel: string }): Promise<T>;
  readonly dialect?: { readonly constructor: unknown };
  readonly $client?: unknown;
}

const ENTITY_KIND = Symbol.for('drizzle:entityKind');

/**
 * The relay's transactions run at READ COMMITTED (PostgreSQL's default; on MySQL/MariaDB, whose default
 * REPEATABLE READ takes gap locks, two relays' claims and deletes were seen deadlocking).
 */
const RELAY_ISOLATION = 'READ COMMITTED';

function isTypeOrm(tx: unknown): tx is TypeOrmManager {
  const manager = tx as TypeOrmManager | undefined;
  return typeof manager?.query === 'function' && (manager.dataSource ?? manager.connection) !== undefined;
}

function isDrizzle(tx: unknown): tx is DrizzleDatabase {
  const db = tx as DrizzleDatabase | undefined;
  return typeof db?.execute === 'function' && db.dialect !== undefined;
}

function typeOrmDialect(manager: TypeOrmManager): OutboxDialect | undefined {
  const type = (manager.dataSource ?? manager.connection)?.options.type;
  return type === 'postgres' ? 'postgres' : type === 'mysql' || type === 'mariadb' ? 'mysql' : undefined;
}

function drizzleDialect(db: DrizzleDatabase): OutboxDialect | undefined {
  const kind = (db.dialect?.constructor as Record<symbol, unknown> | undefined)?.[ENTITY_KIND];
  return kind === 'PgDialect' ? 'postgres' : kind === 'MySqlDialect' ? 'mysql' : undefined;
}

/** Rows of a driver's answer: node-postgres' `{ rows }`, mysql2's `[rows, fields]`, or rows. */
function rowsOf(answer: unknown): Rows {
  if (Array.isArray(answer)) {
    return Array.isArray(answer[0])
      ? (answer[0] as Rows)
      : answer.every((row) => typeof row === 'object')
        ? (answer as Rows)
        : [];
  }
  const rows = (answer as { rows?: unknown } | undefined)?.rows;
  return Array.isArray(rows) ? (rows as Rows) : [];
}

/** A TypeORM EntityManager's executor. */
function typeOrmExecutor(dialect: OutboxDialect): OutboxExecutor {
  return {
    dialect,
    async query(tx, sql, params) {
      return rowsOf(await (tx as TypeOrmManager).query(sql, [...params]));
    },
    transaction: (base, work) => (base as TypeOrmManager).transaction(RELAY_ISOLATION, (manager) => work(manager)),
  };
}

type DrizzleSql = {
  raw(text: string): unknown;
  param(value: unknown): unknown;
  join(chunks: unknown[], separator?: unknown): unknown;
};

/** A Drizzle database's executor (drizzle-orm's `sql` builds the query: its parameters stay parameters). */
function drizzleExecutor(dialect: OutboxDialect, sql: DrizzleSql): OutboxExecutor {
  return {
    dialect,
    async query(tx, text, params) {
      const parts = text.split(/\$\d+|\?/);
      const chunks: unknown[] = [];
      parts.forEach((part, i) => {
        chunks.push(sql.raw(part));
        if (i < params.length) chunks.push(sql.param(params[i]));
      });
      return rowsOf(await (tx as DrizzleDatabase).execute(sql.join(chunks)));
    },
    transaction: (base, work) =>
      (base as DrizzleDatabase).transaction((tx) => work(tx), { isolationLevel: RELAY_ISOLATION.toLowerCase() }),
  };
}

/** The pg Pool of an ORM instance on PostgreSQL (for LISTEN), when it has one. */
export function postgresPoolOf(base: unknown): { connect(): Promise<unknown> } | undefined {
  const candidate = isTypeOrm(base)
    ? (base.dataSource ?? base.connection)?.driver?.master
    : isDrizzle(base)
      ? base.$client
      : base;
  const pool = candidate as { connect?: unknown; totalCount?: unknown } | undefined;
  return typeof pool?.connect === 'function' && typeof pool.totalCount === 'number'
    ? (pool as { connect(): Promise<unknown> })
    : undefined;
}

/**
 * The executor for the ORM instance `base` (the transaction host's instance outside a transaction): the
 * configured one, else TypeORM's or Drizzle's; undefined (with the reason) when none fits.
 */
export async function executorFor(
  base: unknown,
  configured: OutboxExecutor | undefined,
  dialect: OutboxDialect | undefined,
): Promise<OutboxExecutor | string> {
  if (configured) {
    return dialect
      ? { ...configured, dialect }
      : 'outbox.dialect must be given with a custom executor that does not say';
  }
  if (isTypeOrm(base)) {
    const found = dialect ?? typeOrmDialect(base);
    return found ? typeOrmExecutor(found) : 'the TypeORM data source is neither PostgreSQL nor MySQL/MariaDB';
  }
  if (isDrizzle(base)) {
    const found = dialect ?? drizzleDialect(base);
    if (!found) return 'the Drizzle database is neither PostgreSQL nor MySQL/MariaDB';
    const { sql } = (await import('drizzle-orm')) as unknown as { sql: DrizzleSql };
    return drizzleExecutor(found, sql);
  }
  // A driver's own pool (a custom adapter on node-postgres or mysql2).
  if (postgresPoolOf(base)) return postgresDriverExecutor();
  if (typeof (base as { getConnection?: unknown } | undefined)?.getConnection === 'function')
    return mysqlDriverExecutor();
  return 'the transaction host holds neither a TypeORM EntityManager, a Drizzle database nor a node-postgres or mysql2 pool: pass outbox.executor';
}
