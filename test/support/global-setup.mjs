// Finds (or starts) the Redis every test uses and hands its URL to the test workers via REDIS_URL.
// A test run without Redis fails here: a suite that cannot reach Redis never skips silently.
// It also compiles the worker process the chaos suite starts (real child processes need plain JS).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { findRedis } from '../../scripts/redis-server.mjs';
import { findDatabases } from '../../scripts/databases.mjs';

const require = createRequire(import.meta.url);

export default async function globalSetup() {
  const redis = await findRedis();
  process.env.REDIS_URL = redis.url;
  // The scripts run as the library runs them on this server: with Redis 7's flags where it reads them.
  process.env.TASKS_TEST_REDIS_VERSION = redis.version;
  globalThis.__tasksRedis = redis;
  console.log(`\ntests use Redis ${redis.version} at ${redis.url} (${redis.source})`);
  // The outbox's tests need PostgreSQL and MariaDB/MySQL: started here when installed and stopped.
  const databases = await findDatabases();
  process.env.PG_URL = databases.postgres.url;
  process.env.MYSQL_URL = databases.mysql.url;
  for (const [name, { url, up }] of Object.entries(databases)) {
    if (!up)
      console.log(
        `${name} does not answer at ${url}: the outbox tests will fail (see README "Enqueue inside a transaction")`,
      );
  }
  execFileSync(process.execPath, ['scripts/clean.mjs', '.chaos-build'], { stdio: 'inherit' });
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.chaos.json'], {
    stdio: 'inherit',
  });
}
