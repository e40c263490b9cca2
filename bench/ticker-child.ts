import { Redis } from 'ioredis';
import { defineScripts } from '../lib/core/redis/scripts.js';
import { SCHEDULE_LIMITS } from '../lib/core/schedules/tick-firer.js';
import { ScheduleTicker } from '../lib/core/schedules/ticker.js';
import { silentLogger } from '../lib/core/support/logger.js';

/**
 * One firing process of the crowd row (bench/schedule-crowd.ts): a ScheduleTicker on its own connection,
 * as every worker or reaper process runs one. Says `ready` once started, closes on `stop`.
 */
const connection = defineScripts(new Redis(process.env.BENCH_TICKER_URL ?? 'redis://127.0.0.1:6379'));
const ticker = ScheduleTicker.forPrefix(
  connection,
  process.env.BENCH_TICKER_PREFIX ?? 'tasks',
  { checkMs: 1_000, limits: SCHEDULE_LIMITS },
  silentLogger,
);
ticker.start();
process.send?.('ready');
process.on('message', (message) => {
  if (message !== 'stop') return;
  void ticker.close().then(() => {
    connection.disconnect();
    process.exit(0);
  });
});
