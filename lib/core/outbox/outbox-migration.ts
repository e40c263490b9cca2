import type { OutboxDialect } from './outbox-options.js';

/**
 * The outbox table's DDL (the shipped `migrations/outbox.postgres.sql` and `migrations/outbox.mysql.sql`
 * are this text for the default table; a test pins it). Rows are deleted once relayed: the table holds
 * only what waits for Redis, and rows the relay could not read (`error` set).
 */
export function outboxMigration(dialect: OutboxDialect, table = 'redis_task_outbox'): string {
  if (dialect === 'postgres') {
    return `CREATE TABLE IF NOT EXISTS ${table} (
  id BIGSERIAL PRIMARY KEY,
  task_id TEXT NOT NULL,
  pattern TEXT NOT NULL,
  shard_key TEXT NOT NULL,
  fields TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
  error TEXT
);
`;
  }
  return `CREATE TABLE IF NOT EXISTS ${table} (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  task_id TEXT NOT NULL,
  pattern TEXT NOT NULL,
  shard_key TEXT NOT NULL,
  fields LONGTEXT NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  error TEXT NULL
) ENGINE=InnoDB;
`;
}
