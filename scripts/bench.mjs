// npm run bench: compiles the benchmark (Nest needs decorator metadata) and runs it against a
// throwaway redis-server on a free port (nothing else touches it, so INFO commandstats and CPU are
// the two libraries' own), or REDIS_URL / 127.0.0.1:6379 when redis-server is not installed.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { findRedis, hasRedisServer, probe, startRedisServer } from './redis-server.mjs';

const require = createRequire(import.meta.url);

function run(args, env = process.env) {
  return spawnSync(process.execPath, args, { stdio: 'inherit', env }).status ?? 1;
}

let redis;
if (!process.env.REDIS_URL && hasRedisServer()) {
  const server = await startRedisServer(['--maxmemory-policy', 'noeviction']);
  redis = { url: server.url, version: await probe(server.url), source: `a throwaway redis-server on port ${server.port}`, stop: server.stop };
} else {
  redis = await findRedis();
}
console.log(`bench uses Redis ${redis.version} at ${redis.url} (${redis.source})`);
let status = run(['scripts/clean.mjs', '.bench-build']);
if (status === 0) status = run([require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.bench.json']);
if (status === 0) status = run(['scripts/copy-lua.mjs', '.bench-build/lib']);
if (status === 0) {
  status = run(['.bench-build/bench/main.js'], { ...process.env, REDIS_URL: redis.url, BENCH_REDIS_SOURCE: redis.source });
}
await redis.stop();
process.exit(status);
