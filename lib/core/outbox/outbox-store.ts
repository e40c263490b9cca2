import type { OutboxExecutor } from './outbox-options.js';
import { outboxSql, type OutboxSql } from './outbox-sql.js';

/** One task as an outbox row: its id, pattern, shard key and enqueue fields (JSON). */
export interface OutboxRow {
  readonly taskId: string;
  readonly pattern: string;
  readonly shardKey: string;
  readonly fields: string;
}

/** A row claimed by a relay: the row's id too. */
export interface ClaimedRow extends OutboxRow {
  readonly id: string;
}

/** What the table holds: rows waiting, the oldest one's age (ms), rows the relay could not read. */
export interface OutboxStats {
  readonly depth: number;
  readonly lagMs: number;
  readonly rejected: number;
}

/** The transaction host (`@nestjs-cls/transactional`'s `TransactionHost`), as far as the outbox uses it. */
export interface TransactionHostLike {
  readonly tx: unknown;
  isTransactionActive(): boolean;
}

/** A row id as a parameter: a number (ids are BIGINTs; past 2^53, the string). */
function rowId(id: string): number | string {
  const value = Number(id);
  return Number.isSafeInteger(value) ? value : id;
}

/** Most rows in one INSERT (4 parameters each: both databases take up to 65,535 per statement). */
const INSERT_SLICE = 4_000;

/** The outbox table through an executor: rows written in the caller's transaction, claimed and deleted by relays. */
export class OutboxStore {
  readonly sql: OutboxSql;

  constructor(
    readonly executor: OutboxExecutor,
    table: string,
    private readonly host: TransactionHostLike,
  ) {
    this.sql = outboxSql(executor.dialect, table);
  }

  /** Whether the caller runs inside a transaction of the host (then its tasks go to the outbox). */
  inTransaction(): boolean {
    return this.host.isTransactionActive();
  }

  /** Writes the rows in the caller's transaction (on PostgreSQL, relays hear of them at its commit). */
  async write(rows: readonly OutboxRow[]): Promise<void> {
    const tx = this.host.tx;
    for (let start = 0; start < rows.length; start += INSERT_SLICE) {
      const slice = rows.slice(start, start + INSERT_SLICE);
      const params: unknown[] = [];
      for (const row of slice) params.push(row.taskId, row.pattern, row.shardKey, row.fields);
      await this.executor.query(tx, this.sql.insert(slice.length), params);
    }
  }

  /** Runs `work` in a new transaction of the ORM's own instance (a relay's). */
  transaction<T>(work: (tx: unknown) => Promise<T>): Promise<T> {
    return this.executor.transaction(this.host.tx, work);
  }

  /**
   * Up to `limit` rows, oldest first, none another relay holds (held until `tx` ends); on MySQL none while
   * another relay has its turn (see OutboxSql.turn: `endTurn` must follow, in `tx`).
   */
  async claim(tx: unknown, limit: number): Promise<ClaimedRow[]> {
    const turn = this.sql.turn;
    if (turn) {
      const [taken] = await this.executor.query(tx, turn.take, [turn.name]);
      if (Number(taken?.taken) !== 1) return [];
    }
    const rows = await this.executor.query(tx, this.sql.claim, [limit]);
    return rows.map((row) => ({
      id: String(row.id),
      taskId: String(row.task_id),
      pattern: String(row.pattern),
      shardKey: String(row.shard_key),
      fields: String(row.fields),
    }));
  }

  /** Ends this relay's turn (MySQL: the named lock of `claim`; a no-op when it was not taken). */
  async endTurn(tx: unknown): Promise<void> {
    const turn = this.sql.turn;
    if (turn) await this.executor.query(tx, turn.release, [turn.name]);
  }

  async remove(tx: unknown, ids: readonly string[]): Promise<void> {
    // As numbers: MariaDB compares a BIGINT key with string values without its index, scanning (and locking)
    // rows other relays hold: two relays deadlocked on that.
    if (ids.length > 0) await this.executor.query(tx, this.sql.remove(ids.length), ids.map(rowId));
  }

  /** Marks a row the relay cannot read (it stays, for an operator, and is never claimed again). */
  async reject(tx: unknown, id: string, reason: string): Promise<void> {
    await this.executor.query(tx, this.sql.reject, [reason, rowId(id)]);
  }

  async stats(): Promise<OutboxStats> {
    const [row] = await this.executor.query(this.host.tx, this.sql.stats, []);
    return {
      depth: Number(row?.depth ?? 0),
      lagMs: Math.max(0, Math.round(Number(row?.lag_ms ?? 0))),
      rejected: Number(row?.rejected ?? 0),
    };
  }
}

/** What a client needs of the outbox: whether its caller is in a transaction, and the write of rows in it. */
export interface OutboxWriter {
  /** Where a transaction's tasks go: the outbox table, or Redis after the commit (the lossy mode). */
  readonly mode: 'outbox' | 'after-commit';
  inTransaction(): boolean;
  write(rows: readonly OutboxRow[]): Promise<void>;
}
