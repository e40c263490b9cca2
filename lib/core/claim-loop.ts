import type { QueueKeys } from './keys.js';
import { OutageReporter, sleep, type TaskLogger } from './logger.js';
import type { RedisConnection, TaskRedis } from './scripts.js';
import type { Slots } from './slots.js';

export interface ClaimLoopOptions {
  readonly workerId: string;
  readonly prefetch: number;
  readonly blockTimeoutMs: number;
}

export interface ClaimLoopHooks {
  /** Called for every claimed task; the slot it occupies is released by the caller when done. */
  onClaimed(token: string, entry: string): void;
  /** Registers the worker again (the claim script refuses an unregistered worker). */
  register(): Promise<void>;
}

const RETRY_DELAY_MS = 500;

/**
 * The claim loop of one queue. It blocks on its own connection with BLMOVE ring→ring (which both
 * waits for work and rotates the ring round-robin over clients with pending tasks), then claims up
 * to `prefetch` of that client's tasks atomically with `claimTasks`. It never polls: when no client
 * has work it stays blocked until an enqueue pushes a client onto the ring.
 */
export class ClaimLoop {
  private readonly stop = new AbortController();
  private readonly outage: OutageReporter;
  private done: Promise<void> | undefined;

  constructor(
    private readonly redis: TaskRedis,
    private readonly blocking: RedisConnection,
    private readonly keys: QueueKeys,
    private readonly slots: Slots,
    private readonly options: ClaimLoopOptions,
    private readonly hooks: ClaimLoopHooks,
    logger: TaskLogger,
  ) {
    this.outage = new OutageReporter(logger, `claiming from "${keys.queue}"`);
  }

  start(): void {
    this.done ??= this.run();
  }

  /** Stops claiming; resolves when the loop has left its last Redis call. */
  async close(): Promise<void> {
    this.stop.abort();
    this.slots.wakeAll();
    // A connection blocked in BLMOVE can only be interrupted by closing it; BLMOVE ring→ring is
    // non-destructive, so cutting it mid-wait loses nothing.
    this.blocking.disconnect();
    await this.done;
  }

  private get stopped(): boolean {
    return this.stop.signal.aborted;
  }

  private async run(): Promise<void> {
    const { ring } = this.keys;
    const timeoutSeconds = this.options.blockTimeoutMs / 1000;
    while (!this.stopped) {
      await this.slots.whenFree();
      if (this.stopped) {
        break;
      }
      let clientId: string | null;
      try {
        clientId = await this.blocking.blmove(ring, ring, 'LEFT', 'RIGHT', timeoutSeconds);
      } catch (error) {
        if (!this.stopped) {
          this.outage.failed(error);
          await sleep(RETRY_DELAY_MS, this.stop.signal);
        }
        continue;
      }
      this.outage.succeeded();
      if (clientId !== null && !this.stopped) {
        await this.claim(clientId);
      }
    }
  }

  private async claim(clientId: string): Promise<void> {
    let taken = this.slots.take(this.options.prefetch);
    while (taken === 0 && !this.stopped) {
      await this.slots.whenFree();
      taken = this.slots.take(this.options.prefetch);
    }
    if (this.stopped) {
      this.slots.release(taken);
      return;
    }
    let reply: string[] | -1;
    try {
      reply = await this.redis.claimTasks(
        this.keys.ring,
        this.keys.pending(clientId),
        this.keys.priority(clientId),
        this.keys.processing(this.options.workerId),
        this.keys.sequence,
        this.keys.workers,
        clientId,
        taken,
        this.options.workerId,
      );
    } catch (error) {
      this.slots.release(taken);
      this.outage.failed(error);
      await sleep(RETRY_DELAY_MS, this.stop.signal);
      return;
    }
    if (reply === -1) {
      this.slots.release(taken);
      await this.hooks.register().catch((error: unknown) => this.outage.failed(error));
      return;
    }
    const claimed = reply.length / 2;
    this.slots.release(taken - claimed);
    for (let i = 0; i < reply.length; i += 2) {
      this.hooks.onClaimed(reply[i], reply[i + 1]);
    }
  }
}
