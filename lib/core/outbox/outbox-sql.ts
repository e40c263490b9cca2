import type { OutboxDialect } from './outbox-options.js';

/**
 * The outbox's SQL, per dialect, in one place (the shipped migrations create the table it reads; a test
 * pins that both agree). Placeholders are the dialect's own: `$1`, `$2`... on PostgreSQL, `?` on MySQL.
 *
 * Columns: `id` (ascending, the relay's order), `task_id` (the task's id: its identity in Redis, so a row
 * relayed again writes nothing), `pattern`, `shard_key` (what picks the pattern's shard), `fields` (the
 * enqueue script's fields of the task, JSON: validated and encoded at emit time), `created_at`, `error`
 * (set on a row the relay cannot read: it is left for an operator and never claimed again).
 */
export interface OutboxSql {
  readonly dialect: OutboxDialect;
  /** Inserts `count` rows of 4 values each (task_id, pattern, shard_key, fields); on PostgreSQL it also notifies. */
  insert(count: number): string;
  /** Claims up to $1 rows without waiting for rows other relays hold. */
  readonly claim: string;
  /** Deletes the rows of `count` ids. */
  remove(count: number): string;
  /** Marks one row unreadable: error $1, id $2. */
  readonly reject: string;
  /** Waiting rows, the age of the oldest (ms), rows marked unreadable. */
  readonly stats: string;
  /** PostgreSQL's LISTEN channel of the table (undefined on MySQL). */
  readonly channel?: string;
  /**
   * MySQL/MariaDB: relays take turns, a named lock ($1 its name) taken without waiting before the claim
   * and released after the delete. MariaDB 10.11's SKIP LOCKED leaves lock requests on the rows it skipped:
   * measured, a relay's delete of its own claimed rows waited for the other relay's transaction, and two
   * relays deadlocked. Undefined on PostgreSQL (relays claim side by side).
   */
  readonly turn?: { readonly take: string; readonly release: string; readonly name: string };
}

const COLUMNS = 'task_id, pattern, shard_key, fields';
const CLAIMED = 'id, task_id, pattern, shard_key, fields';

/** The LISTEN/NOTIFY channel of a table: its name, schema dots made underscores. */
export function outboxChannel(table: string): string {
  return `${table.replaceAll('.', '_')}_relay`;
}

export function outboxSql(dialect: OutboxDialect, table: string): OutboxSql {
  if (dialect === 'postgres') {
    const channel = outboxChannel(table);
    return {
      dialect,
      channel,
      insert: (count) => {
        const rows: string[] = [];
        for (let i = 0; i < count; i++) rows.push(`($${4 * i + 1}, $${4 * i + 2}, $${4 * i + 3}, $${4 * i + 4})`);
        // The NOTIFY is delivered at commit (never after a rollback); notifications of one transaction are one.
        return `WITH w AS (INSERT INTO ${table} (${COLUMNS}) VALUES ${rows.join(', ')}) SELECT pg_notify('${channel}', '')`;
      },
      claim: `SELECT ${CLAIMED} FROM ${table} WHERE error IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
      remove: (count) =>
        `DELETE FROM ${table} WHERE id IN (${Array.from({ length: count }, (_, i) => `$${i + 1}`).join(', ')})`,
      reject: `UPDATE ${table} SET error = $1 WHERE id = $2`,
      stats:
        `SELECT count(*) FILTER (WHERE error IS NULL) AS depth, ` +
        `COALESCE(EXTRACT(EPOCH FROM (clock_timestamp() - min(created_at) FILTER (WHERE error IS NULL))) * 1000, 0) AS lag_ms, ` +
        `count(*) FILTER (WHERE error IS NOT NULL) AS rejected FROM ${table}`,
    };
  }
  return {
    dialect,
    turn: {
      take: 'SELECT GET_LOCK(?, 0) AS taken',
      release: 'SELECT RELEASE_LOCK(?) AS released',
      // GET_LOCK names are at most 64 characters.
      name: `redis_task_outbox_relay:${table}`.slice(0, 64),
    },
    insert: (count) =>
      `INSERT INTO ${table} (${COLUMNS}) VALUES ${Array.from({ length: count }, () => '(?, ?, ?, ?)').join(', ')}`,
    claim: `SELECT ${CLAIMED} FROM ${table} WHERE error IS NULL ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`,
    remove: (count) => `DELETE FROM ${table} WHERE id IN (${Array.from({ length: count }, () => '?').join(', ')})`,
    reject: `UPDATE ${table} SET error = ? WHERE id = ?`,
    stats:
      `SELECT COALESCE(SUM(error IS NULL), 0) AS depth, ` +
      `COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN error IS NULL THEN created_at END), NOW(3)) / 1000, 0) AS lag_ms, ` +
      `COALESCE(SUM(error IS NOT NULL), 0) AS rejected FROM ${table}`,
  };
}
