import { Counter, Gauge, type Registry } from 'prom-client';
import type { RedisTaskOutboxStats } from './outbox-stats.js';

/**
 * The outbox's metrics (registered by RedisTaskMetrics when the app has a `RedisTaskOutboxModule`), read
 * from the table at each scrape: rows waiting, the oldest one's age (the relay lag), rows left unreadable,
 * and this process's relay counts. `read` answers within the scrape timeout or not at all (the gauges then
 * keep their last values).
 */
export function registerOutboxMetrics(
  registry: Registry,
  name: (suffix: string) => string,
  read: () => Promise<RedisTaskOutboxStats | undefined>,
): void {
  let last: Promise<RedisTaskOutboxStats | undefined> | undefined;
  // One read of the table per scrape, shared by the metrics below (each collects on its own).
  const stats = (): Promise<RedisTaskOutboxStats | undefined> => {
    last ??= read().finally(() => setTimeout(() => (last = undefined), 100).unref());
    return last;
  };
  const gauge = (suffix: string, help: string, value: (s: RedisTaskOutboxStats) => number): void => {
    const metric = name(suffix);
    if (registry.getSingleMetric(metric)) return;
    new Gauge({
      name: metric,
      help,
      registers: [registry],
      async collect() {
        const current = await stats();
        if (current) this.set(value(current));
      },
    });
  };
  gauge('outbox_depth', 'Rows in the outbox table waiting for a relay', (s) => s.depth);
  gauge(
    'outbox_lag_seconds',
    'Age of the oldest row waiting in the outbox table (the relay lag)',
    (s) => s.lagMs / 1000,
  );
  gauge(
    'outbox_rejected',
    'Rows of the outbox table the relay could not read (marked, left for an operator)',
    (s) => s.rejected,
  );
  const relayed = name('outbox_relayed_total');
  if (!registry.getSingleMetric(relayed)) {
    new Counter({
      name: relayed,
      help: "Rows this process's outbox relay moved to Redis",
      registers: [registry],
      async collect() {
        const current = await stats();
        if (!current?.relay) return;
        this.reset();
        this.inc(current.relay.relayed);
      },
    });
  }
}
