import type { OutboxExecutor } from './outbox-options.js';

/**
 * Executors over the drivers themselves, for apps whose transaction host holds a driver's own objects
 * (a custom `@nestjs-cls/transactional` adapter on node-postgres or mysql2, say): `tx` is a pool or a
 * connection checked out of it (inside a transaction), `base` the pool. TypeORM and Drizzle need none
 * (see outbox-executors.ts).
 */

type Rows = Record<string, unknown>[];

interface PgQueryable {
  query(sql: string, params?: unknown[]): Promise<{ rows: unknown[] }>;
}
interface PgPool extends PgQueryable {
  connect(): Promise<PgQueryable & { release(error?: Error): void }>;
}
interface MysqlQueryable {
  query(sql: string, params?: unknown[]): Promise<[unknown, unknown]>;
}
interface MysqlPool extends MysqlQueryable {
  getConnection(): Promise<
    MysqlQueryable & {
      beginTransaction(): Promise<void>;
      commit(): Promise<void>;
      rollback(): Promise<void>;
      release(): void;
    }
  >;
}

/** node-postgres (`pg.Pool`, or a `PoolClient` inside a transaction). */
export function postgresDriverExecutor(): OutboxExecutor {
  return {
    dialect: 'postgres',
    async query(tx, sql, params) {
      return (await (tx as PgQueryable).query(sql, [...params])).rows as Rows;
    },
    async transaction(base, work) {
      const client = await (base as PgPool).connect();
      try {
        await client.query('BEGIN');
        const result = await work(client);
        await client.query('COMMIT');
        client.release();
        return result;
      } catch (error) {
        // A connection whose rollback failed is broken: released with the error (the pool drops it).
        await client.query('ROLLBACK').then(
          () => client.release(),
          (broken: Error) => client.release(broken),
        );
        throw error;
      }
    },
  };
}

/** mysql2/promise (a `Pool`, or a `PoolConnection` inside a transaction); the relay at READ COMMITTED. */
export function mysqlDriverExecutor(): OutboxExecutor {
  return {
    dialect: 'mysql',
    async query(tx, sql, params) {
      const [rows] = await (tx as MysqlQueryable).query(sql, [...params]);
      return (Array.isArray(rows) ? rows : []) as Rows;
    },
    async transaction(base, work) {
      const connection = await (base as MysqlPool).getConnection();
      try {
        await connection.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
        await connection.beginTransaction();
        const result = await work(connection);
        await connection.commit();
        return result;
      } catch (error) {
        await connection.rollback().catch(() => undefined);
        throw error;
      } finally {
        connection.release();
      }
    },
  };
}
