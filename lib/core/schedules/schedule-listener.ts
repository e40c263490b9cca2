import { openBlockingConnection, quit } from '../redis/connection.js';
import { PrefixKeys } from '../redis/keys.js';
import type { RedisConnection } from '../redis/scripts.js';

/**
 * Hears a prefix's schedules being stored or resumed, for a process that holds no subscriber of its own (a
 * module's RedisTaskReaper; a worker hears them on the subscriber it holds anyway): one connection
 * subscribed to the schedules' channel. `onChange` runs on each message, and after each reconnection (what
 * was published while it was away was not heard). With it, a ticker sleeps until the earliest tick it knows
 * instead of asking Redis every second.
 */
export class ScheduleListener {
  private constructor(private readonly subscriber: RedisConnection) {}

  /**
   * Subscribed once this resolves; rejects (its connection closed) when the subscription is refused, or when
   * `signal` aborts first (a process closing while Redis is away: a subscription waiting for it is cut).
   */
  static async forPrefix(
    redis: RedisConnection,
    prefix: string,
    onChange: () => void,
    signal: AbortSignal,
  ): Promise<ScheduleListener> {
    const subscriber = openBlockingConnection(redis, 'tasks:reaper:schedules');
    const cut = () => void quit(subscriber);
    signal.addEventListener('abort', cut, { once: true });
    let subscribed = false;
    subscriber.on('message', () => onChange());
    subscriber.on('ready', () => {
      if (subscribed) onChange();
    });
    try {
      await subscriber.subscribe(new PrefixKeys(prefix).schedules.changed);
    } catch (error) {
      await quit(subscriber);
      throw error;
    } finally {
      signal.removeEventListener('abort', cut);
    }
    if (signal.aborted) {
      await quit(subscriber);
      throw new Error('closed while subscribing');
    }
    subscribed = true;
    return new ScheduleListener(subscriber);
  }

  close(): Promise<void> {
    return quit(this.subscriber);
  }
}
