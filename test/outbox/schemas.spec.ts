/**
 * The outbox table as shipped: the SQL migrations are the text the relay's tests create tables from, and
 * the TypeORM entity and Drizzle schemas make the same columns (created by TypeORM's synchronize, written
 * and read by Drizzle's query builder, relayed by the relay).
 */
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from '@jest/globals';
import { DataSource } from 'typeorm';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { outboxMigration } from '../../lib/core/outbox/outbox-migration.js';
import { RedisTaskOutboxEntity } from '../../lib/outbox-typeorm.js';
import { redisTaskOutboxMysql, redisTaskOutboxPg } from '../../lib/outbox-drizzle.js';
import { createDatabase, mysqlUrl, postgresUrl, type TestDatabase } from '../support/databases.js';

type Dialect = 'postgres' | 'mysql';
const databases: TestDatabase[] = [];

afterAll(async () => {
  for (const db of databases) await db.drop();
});

/** Column names and nullability of a table, sorted. */
async function columnsOf(db: TestDatabase, table: string): Promise<string[]> {
  const rows = await db.query(
    db.dialect === 'postgres'
      ? `SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`
      : `SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = ? AND table_name = ?`,
    [db.schema, table],
  );
  return rows
    .map((row) => `${String(row.column_name ?? row.COLUMN_NAME)} ${String(row.is_nullable ?? row.IS_NULLABLE)}`)
    .sort();
}

describe.each<Dialect>(['postgres', 'mysql'])('the outbox table on %s', (dialect) => {
  it('ships the migration the relay reads', () => {
    const shipped = readFileSync(`migrations/outbox.${dialect}.sql`, 'utf8');
    expect(
      shipped
        .split('\n')
        .filter((line) => !line.startsWith('--'))
        .join('\n'),
    ).toBe(outboxMigration(dialect));
  });

  it('has the same columns as a TypeORM entity (synchronize) as from the migration', async () => {
    const db = await createDatabase(dialect);
    databases.push(db);
    const dataSource = new DataSource(
      dialect === 'postgres'
        ? {
            type: 'postgres',
            url: postgresUrl(),
            schema: db.schema,
            entities: [RedisTaskOutboxEntity],
            synchronize: true,
          }
        : {
            type: 'mysql',
            url: mysqlUrl().replace(/\/[^/]*$/, `/${db.schema}`),
            entities: [RedisTaskOutboxEntity],
            synchronize: true,
          },
    );
    // The migration made `<schema>.redis_task_outbox`: TypeORM's goes next to it under another name.
    await db.query(
      `ALTER TABLE ${db.outboxTable} RENAME TO ${dialect === 'postgres' ? '' : `${db.schema}.`}from_migration`,
    );
    await dataSource.initialize();
    try {
      expect(await columnsOf(db, 'redis_task_outbox')).toEqual(await columnsOf(db, 'from_migration'));
      const saved = await dataSource.getRepository(RedisTaskOutboxEntity).save({
        taskId: 't-1',
        pattern: 'p',
        shardKey: 'api',
        fields: '["api","x"]',
        error: null,
      });
      expect(Number(saved.id)).toBeGreaterThan(0);
      expect(saved.createdAt).toBeInstanceOf(Date);
    } finally {
      await dataSource.destroy();
    }
  });

  it('reads and writes the migration table through the Drizzle schema', async () => {
    const db = await createDatabase(dialect);
    databases.push(db);
    if (dialect === 'postgres') {
      const pool = new pg.Pool({ connectionString: postgresUrl(), options: `-c search_path=${db.schema}`, max: 1 });
      try {
        const orm = drizzlePg({ client: pool });
        await orm.insert(redisTaskOutboxPg).values({ taskId: 't-1', pattern: 'p', shardKey: 'api', fields: '[]' });
        const [row] = await orm.select().from(redisTaskOutboxPg);
        expect(row).toMatchObject({ taskId: 't-1', pattern: 'p', shardKey: 'api', fields: '[]', error: null });
        expect(row.createdAt).toBeInstanceOf(Date);
      } finally {
        await pool.end();
      }
    } else {
      const pool = mysql.createPool({ uri: mysqlUrl(), database: db.schema, connectionLimit: 1 });
      try {
        const orm = drizzleMysql({ client: pool });
        await orm.insert(redisTaskOutboxMysql).values({ taskId: 't-1', pattern: 'p', shardKey: 'api', fields: '[]' });
        const [row] = await orm.select().from(redisTaskOutboxMysql);
        expect(row).toMatchObject({ taskId: 't-1', pattern: 'p', shardKey: 'api', fields: '[]', error: null });
        expect(row.createdAt).toBeInstanceOf(Date);
      } finally {
        await pool.end();
      }
    }
  });
});
