/** Which connection an operation waits on. */
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
  private readonly outstanding = new Map<symbol, { since: number; allowanceMs: number; connection: LoopConnection }>();

  /** Resolves as `operation` does, tracked meanwhile. */
  async track<T>(connection: LoopConnection, allowanceMs: number, operation: Promise<T>): Promise<T> {
    const id = Symbol();
    this.outstanding.set(id, { since: Date.now(), allowanceMs, connection });
    try {
      return await operation;
    } finally {
      this.outstanding.delete(id);
    }
  }

  /** The operation furthest past its allowance, if one is. */
  overdue(now = Date.now()): Overdue | undefined {
    let worst: Overdue | undefined;
    for (const { since, allowanceMs, connection } of this.outstanding.values()) {
      const overdueMs = now - since - allowanceMs;
      if (overdueMs > 0 && (!worst || overdueMs > worst.overdueMs)) worst = { connection, overdueMs };
    }
    return worst;
  }
}
