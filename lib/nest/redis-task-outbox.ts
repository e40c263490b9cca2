import {
  Inject,
  Injectable,
  Logger,
  Module,
  type BeforeApplicationShutdown,
  type DynamicModule,
  type OnApplicationBootstrap,
  type OnModuleInit,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getTransactionHostToken } from '@nestjs-cls/transactional';
import { InvalidOptionError } from '../core/model/errors.js';
import { executorFor, postgresPoolOf } from '../core/outbox/outbox-executors.js';
import { OutboxListener } from '../core/outbox/outbox-listener.js';
import {
  resolveOutboxOptions,
  type RedisTaskOutboxOptions,
  type ResolvedOutboxOptions,
} from '../core/outbox/outbox-options.js';
import { OutboxRelay } from '../core/outbox/outbox-relay.js';
import {
  OutboxStore,
  type OutboxRow,
  type OutboxWriter,
  type TransactionHostLike,
} from '../core/outbox/outbox-store.js';
import { RedisTaskClient } from './redis-task.client.js';
import { commitScope, hookCommits } from './transaction-hook.js';
import { sendAfterCommit, type AfterCommitCounts } from '../core/outbox/after-commit.js';
import { REDIS_TASK_OUTBOX_STATS, type OutboxStatsSource, type RedisTaskOutboxStats } from './outbox-stats.js';

export type { RedisTaskOutboxStats };

export const REDIS_TASK_OUTBOX_OPTIONS = Symbol('REDIS_TASK_OUTBOX_OPTIONS');

/**
 * The transactional outbox: `emit()` and `emitBatch()` of the app's `RedisTaskClient` called inside a
 * `@Transactional()` method (`@nestjs-cls/transactional`) write their tasks to the outbox table in that
 * transaction; this process's relay (and every other replica's) moves committed rows to Redis, each task
 * exactly once. See README "Enqueue inside a transaction".
 */
@Injectable()
export class RedisTaskOutbox
  implements OutboxWriter, OutboxStatsSource, OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown
{
  readonly options: ResolvedOutboxOptions;
  private readonly log = new Logger(RedisTaskOutbox.name);
  private store: OutboxStore | undefined;
  private relay: OutboxRelay | undefined;
  /** The relay of relayNow() (the background one, or one made for it when that is off). */
  private manual: OutboxRelay | undefined;
  private listener: OutboxListener | undefined;
  private host: TransactionHostLike | undefined;
  private client: RedisTaskClient | undefined;
  /** Whether commits of the host wake the relay (see transaction-hook.ts). */
  private hooked = false;

  constructor(
    @Inject(REDIS_TASK_OUTBOX_OPTIONS) options: RedisTaskOutboxOptions | undefined,
    private readonly moduleRef: ModuleRef,
  ) {
    this.options = resolveOutboxOptions(options);
  }

  /** Where a transaction's tasks go (see `RedisTaskOutboxOptions.mode`). */
  get mode(): 'outbox' | 'after-commit' {
    return this.options.mode;
  }

  /** The after-commit mode's counts (tasks sent after their commit, tasks lost). */
  readonly afterCommit: AfterCommitCounts = { sent: 0, lost: 0 };

  async onModuleInit(): Promise<void> {
    const token = getTransactionHostToken(this.options.connectionName);
    const host = this.moduleRef.get<TransactionHostLike>(token as never, { strict: false });
    const client = this.moduleRef.get(RedisTaskClient, { strict: false });
    this.host = host;
    this.client = client;
    if (this.options.mode === 'after-commit') {
      const target = client.outboxTarget();
      const hooked = hookCommits(host, (scope) => {
        if (scope.rows.length === 0) return;
        void sendAfterCommit(scope.rows, target, this.options.relayRecordMs, this.afterCommit, this.log);
      });
      if (!hooked) {
        throw new InvalidOptionError(
          'outbox.mode',
          "'after-commit' needs @nestjs-cls/transactional 3 (its transaction wrappers)",
        );
      }
      client.useOutbox(this);
      return;
    }
    const executor = await executorFor(host.tx, this.options.executor, this.options.dialect);
    if (typeof executor === 'string') throw new InvalidOptionError('outbox', `cannot be used: ${executor}`);
    this.store = new OutboxStore(executor, this.options.table, host);
    if (this.options.relay) this.relay = new OutboxRelay(this.store, client.outboxTarget(), this.options, this.log);
    // A commit of rows wakes this process's relay at once (without the hook, it looks often after each write).
    this.hooked = hookCommits(host, (scope) => {
      if (scope.wrote) this.relay?.wake();
    });
    client.useOutbox(this);
  }

  async onApplicationBootstrap(): Promise<void> {
    const { store, relay, host } = this;
    if (!store || !relay || !host) return;
    relay.start();
    const pool = store.sql.channel && this.options.listen ? postgresPoolOf(host.tx) : undefined;
    if (pool && store.sql.channel) {
      this.listener = new OutboxListener(pool, store.sql.channel, () => relay.wake(), this.log);
      await this.listener.start();
    }
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.client?.useOutbox(undefined);
    await this.listener?.stop();
    await this.relay?.stop();
  }

  /** Whether the caller runs inside a transaction (its emits then go to the outbox, or wait for the commit). */
  inTransaction(): boolean {
    return this.host?.isTransactionActive() ?? false;
  }

  /** Writes rows in the caller's transaction (after-commit mode: keeps them for its commit). */
  async write(rows: readonly OutboxRow[]): Promise<void> {
    const scope = commitScope();
    if (this.options.mode === 'after-commit') {
      if (!scope) throw new Error('after-commit mode: this transaction began outside the hooked transaction host');
      scope.rows.push(...rows);
      return;
    }
    await this.required().write(rows);
    if (scope) scope.wrote = true;
    if (!this.hooked || !scope) this.relay?.nudge();
  }

  /** The table's state and this process's relay counts. */
  async stats(): Promise<RedisTaskOutboxStats> {
    if (this.options.mode === 'after-commit') {
      return { depth: 0, lagMs: 0, rejected: 0, relay: undefined, afterCommit: { ...this.afterCommit } };
    }
    const stats = await this.required().stats();
    // spread-ok: once per stats read (a scrape, a health check)
    return { ...stats, relay: this.relay ? { ...this.relay.counts } : undefined };
  }

  /**
   * Runs one relay transaction now (rows claimed; moved unless it failed, which throws); also in a process
   * whose background relay is off (`relay: false`). Resolves with how many rows it claimed.
   */
  relayNow(): Promise<number> {
    if (!this.relay && !this.client) throw new Error('RedisTaskOutbox is not initialized yet (onModuleInit)');
    this.manual ??=
      this.relay ??
      new OutboxRelay(this.required(), (this.client as RedisTaskClient).outboxTarget(), this.options, this.log);
    return this.manual.relayOnce();
  }

  private required(): OutboxStore {
    if (!this.store) throw new Error('RedisTaskOutbox is not initialized yet (onModuleInit)');
    return this.store;
  }
}

/**
 * Enables the transactional outbox for the app's `RedisTaskClient` (registered by `RedisTaskModule`) with
 * the `@nestjs-cls/transactional` setup the app already has (`ClsModule` with `ClsPluginTransactional`).
 *
 * ```ts
 * @Module({ imports: [RedisTaskModule.forRoot({ clientId: 'api' }), RedisTaskOutboxModule.forRoot({ table: 'redis_task_outbox' })] })
 * ```
 */
@Module({})
export class RedisTaskOutboxModule {
  static forRoot(options: RedisTaskOutboxOptions = {}): DynamicModule {
    resolveOutboxOptions(options); // a bad option fails here, named
    return {
      module: RedisTaskOutboxModule,
      // Global: the metrics, the health indicator and the dashboard find it wherever they are provided.
      global: true,
      providers: [
        { provide: REDIS_TASK_OUTBOX_OPTIONS, useValue: options },
        RedisTaskOutbox,
        { provide: REDIS_TASK_OUTBOX_STATS, useExisting: RedisTaskOutbox },
      ],
      exports: [RedisTaskOutbox, REDIS_TASK_OUTBOX_STATS],
    };
  }
}
