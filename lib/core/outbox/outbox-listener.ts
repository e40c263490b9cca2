import { errorMessage, type TaskLogger } from '../support/logger.js';

interface PgClient {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  removeAllListeners(event?: string): unknown;
  release(error?: Error | boolean): void;
}

/** How long after a lost LISTEN connection it is made again (ms). */
const RELISTEN_MS = 1_000;

/**
 * PostgreSQL's wake for relays: one connection of the ORM's pool held to LISTEN on the table's channel
 * (the outbox's INSERT notifies it, delivered at commit). A lost connection is replaced after a second;
 * meanwhile the relay polls. Not on MySQL/MariaDB (no LISTEN: the relay polls).
 */
export class OutboxListener {
  private client: PgClient | undefined;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(
    private readonly pool: { connect(): Promise<unknown> },
    private readonly channel: string,
    private readonly onCommit: () => void,
    private readonly logger?: TaskLogger,
  ) {}

  async start(): Promise<void> {
    this.stopped = false;
    try {
      const client = (await this.pool.connect()) as PgClient;
      if (this.stopped) return client.release();
      client.on('notification', this.onCommit);
      client.on('error', (error) => this.lost(client, error));
      await client.query(`LISTEN "${this.channel}"`);
      this.client = client;
      this.onCommit(); // rows committed while nobody listened
    } catch (error) {
      this.logger?.warn(`outbox relay: cannot LISTEN (polling meanwhile): ${errorMessage(error)}`);
      this.again();
    }
  }

  private lost(client: PgClient, error: Error): void {
    if (this.client !== client) return;
    this.client = undefined;
    client.removeAllListeners('notification');
    client.release(error);
    if (!this.stopped) {
      this.logger?.warn(`outbox relay: the LISTEN connection was lost (polling meanwhile): ${errorMessage(error)}`);
      this.again();
    }
  }

  private again(): void {
    if (this.stopped) return;
    this.retry = setTimeout(() => void this.start(), RELISTEN_MS);
    this.retry.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    client.removeAllListeners('notification');
    try {
      await client.query(`UNLISTEN "${this.channel}"`);
      client.release();
    } catch (error) {
      client.release(error as Error);
    }
  }
}
