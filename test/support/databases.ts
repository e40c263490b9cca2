/**
 * The SQL databases of the outbox's tests (real PostgreSQL and MariaDB/MySQL, found or started by the global
 * setup: PG_URL, MYSQL_URL): each test gets a schema (PostgreSQL) or database (MySQL) of its own, with the
 * outbox table of the shipped migration and an `orders` table, dropped afterwards. The apps that use them run
 * in child processes (test/outbox/fixtures/outbox-app.ts): `nestjs-cls` is CommonJS and requires Nest 12,
 * which is ESM, and Jest's own module loader cannot do that on Node 20 (plain Node can: require(esm)).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { outboxMigration } from '../../lib/core/outbox/outbox-migration.js';
import type { OutboxDialect } from '../../lib/core/outbox/outbox-options.js';

export type Orm = 'typeorm' | 'drizzle';

export function postgresUrl(): string {
  return process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
}

export function mysqlUrl(): string {
  return process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
}

const MISSING = {
  postgres:
    'PostgreSQL does not answer at PG_URL (default 127.0.0.1:5432): install and start it (apt-get install postgresql)',
  mysql:
    'MariaDB/MySQL does not answer at MYSQL_URL (default 127.0.0.1:3306): install and start it (apt-get install mariadb-server)',
};

/** A schema (PostgreSQL) or database (MySQL) of a test's own, with the outbox and `orders` tables. */
export interface TestDatabase {
  readonly dialect: OutboxDialect;
  /** `<schema>.` prefix for table names. */
  readonly schema: string;
  readonly outboxTable: string;
  /** The driver's pool (node-postgres `Pool`, mysql2 `Pool`). */
  readonly pool: unknown;
  /** Runs SQL outside any transaction (`$n` placeholders on PostgreSQL, `?` on MySQL). */
  query(text: string, params?: readonly unknown[]): Promise<Record<string, unknown>[]>;
  /** Order ids committed. */
  orders(): Promise<string[]>;
  /** Rows waiting in the outbox. */
  outboxRows(): Promise<Record<string, unknown>[]>;
  drop(): Promise<void>;
}

export async function createDatabase(dialect: OutboxDialect): Promise<TestDatabase> {
  const schema = `rt_${randomBytes(5).toString('hex')}`;
  const outboxTable = `${schema}.redis_task_outbox`;
  let query: TestDatabase['query'];
  let close: () => Promise<void>;
  let driverPool: unknown;
  try {
    if (dialect === 'postgres') {
      const pool = new pg.Pool({ connectionString: postgresUrl(), max: 8 });
      driverPool = pool;
      query = async (text, params = []) => (await pool.query(text, [...params])).rows as Record<string, unknown>[];
      close = () => pool.end();
      await query(`CREATE SCHEMA ${schema}`);
      await query(outboxMigration('postgres', outboxTable));
      await query(`CREATE TABLE ${schema}.orders (id TEXT PRIMARY KEY)`);
    } else {
      const pool = mysql.createPool({ uri: mysqlUrl(), connectionLimit: 8 });
      driverPool = pool;
      query = async (text, params = []) => {
        const [rows] = await pool.query(text, [...params]);
        return (Array.isArray(rows) ? rows : []) as Record<string, unknown>[];
      };
      close = () => pool.end();
      await query(`CREATE DATABASE ${schema}`);
      await query(outboxMigration('mysql', outboxTable));
      await query(`CREATE TABLE ${schema}.orders (id VARCHAR(100) PRIMARY KEY) ENGINE=InnoDB`);
    }
  } catch (error) {
    throw new Error(`${MISSING[dialect]} (${(error as Error).message})`, { cause: error });
  }
  return {
    dialect,
    schema,
    outboxTable,
    pool: driverPool,
    query,
    orders: async () => (await query(`SELECT id FROM ${schema}.orders`)).map((row) => String(row.id)),
    outboxRows: () => query(`SELECT * FROM ${outboxTable} ORDER BY id`),
    async drop() {
      await query(dialect === 'postgres' ? `DROP SCHEMA ${schema} CASCADE` : `DROP DATABASE ${schema}`);
      await close();
    },
  };
}
