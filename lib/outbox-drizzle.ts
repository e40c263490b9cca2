/**
 * `nestjs-redis-tasks/outbox-drizzle`: the outbox table as Drizzle schemas, for apps whose migrations
 * drizzle-kit generates (export the one of your database from your schema file). They match the shipped SQL
 * migrations (`migrations/outbox.postgres.sql`, `migrations/outbox.mysql.sql`); a test pins the columns.
 */
import { bigint as myBigint, datetime, longtext, mysqlTable, text as myText } from 'drizzle-orm/mysql-core';
import { bigserial, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

/** The outbox table on PostgreSQL. */
export const redisTaskOutboxPg = pgTable('redis_task_outbox', {
  id: bigserial('id', { mode: 'bigint' }).primaryKey(),
  taskId: text('task_id').notNull(),
  pattern: text('pattern').notNull(),
  shardKey: text('shard_key').notNull(),
  fields: text('fields').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true, precision: 6 })
    .notNull()
    .default(sql`clock_timestamp()`),
  error: text('error'),
});

/** The outbox table on MySQL/MariaDB. */
export const redisTaskOutboxMysql = mysqlTable('redis_task_outbox', {
  id: myBigint('id', { mode: 'bigint' }).autoincrement().primaryKey(),
  taskId: myText('task_id').notNull(),
  pattern: myText('pattern').notNull(),
  shardKey: myText('shard_key').notNull(),
  fields: longtext('fields').notNull(),
  createdAt: datetime('created_at', { fsp: 3 })
    .notNull()
    .default(sql`CURRENT_TIMESTAMP(3)`),
  error: myText('error'),
});
