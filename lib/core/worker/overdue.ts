import { SlotSet } from '../support/churn-tables.js';

/**
 * Which connection an operation waits on: the worker's command connection, or its one blocking
 * connection (lent to one idle loop at a time; an idle wait without it sends nothing until it ends, then
 * claims on the command connection).
 */
export type LoopConnection = 'blocking' | 'command';

/** An operation that Redis has not answered for longer than it should take. */
export interface Overdue {
  readonly connection: LoopConnection;
  /** How long past its allowance (ms). */
  readonly overdueMs: number;
}

/** The Redis operations of a claim loop under way, so the watchdog can tell a connection that stopped answering. */
export class OperationsUnderWay {
  /** When each started, and how long it may take (a blocking read: its timeout). */
  private readonly outstanding = new SlotSet<{
    readonly since: number;
    readonly allowanceMs: number;
    readonly connection: LoopConnection;
  }>();

  /** Resolves as `operation` does, tracked meanwhile. */
  async track<T>(connection: LoopConnection, allowanceMs: number, operation: Promise<T>): Promise<T> {
    const entry = { since: Date.now(), allowanceMs, connection };
    const slot = this.outstanding.add(entry);
    try {
      return await operation;
    } finally {
      this.outstanding.delete(slot, entry);
    }
  }

  /**
   * The operation furthest past its allowance, if one is. An operation whose connection became ready
   * again after it started (`readySince`) was sent again then, so it gets its whole allowance from
   * that moment: a wait cut by a reconnection is not cut again before the resent one could end.
   */
  overdue(
    now = Date.now(),
    readySince: (connection: LoopConnection) => number | undefined = () => undefined,
  ): Overdue | undefined {
    let worst: Overdue | undefined;
    for (const { since, allowanceMs, connection } of this.outstanding.values()) {
      const overdueMs = now - Math.max(since, readySince(connection) ?? 0) - allowanceMs;
      if (overdueMs > 0 && (!worst || overdueMs > worst.overdueMs)) worst = { connection, overdueMs };
    }
    return worst;
  }
}
