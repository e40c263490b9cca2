// npm run sample: finds Redis (REDIS_URL, else 127.0.0.1:6379, else a throwaway redis-server),
// compiles the sample with tsc (Nest needs decorator metadata), and runs it.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { findRedis } from './redis-server.mjs';

const require = createRequire(import.meta.url);

function run(args, env = process.env) {
  const result = spawnSync(process.execPath, args, { stdio: 'inherit', env });
  return result.status ?? 1;
}

let redis;
try {
  redis = await findRedis();
} catch (error) {
  console.error(`npm run sample: ${error.message}`);
  process.exit(1);
}
console.log(`sample uses Redis ${redis.version} at ${redis.url} (${redis.source})`);
let status = run(['scripts/embed-lua.mjs']);
if (status === 0) status = run(['scripts/clean.mjs', '.sample-build']);
if (status === 0) status = run([require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.sample.json']);
if (status === 0) status = run(['.sample-build/sample/main.js'], { ...process.env, REDIS_URL: redis.url });
await redis.stop();
process.exit(status);
