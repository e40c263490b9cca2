// npm run bench: compiles the benchmark (Nest needs decorator metadata) and runs it against a
// throwaway redis-server on a free port (nothing else touches it, so INFO commandstats and CPU are
// the two libraries' own), or REDIS_URL / 127.0.0.1:6379 when redis-server is not installed.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { clusterNodeArgs, createCluster, findRedis, hasRedisServer, probe, startRedisServer } from './redis-server.mjs';

const require = createRequire(import.meta.url);

function run(args, env = process.env) {
  return spawnSync(process.execPath, args, { stdio: 'inherit', env }).status ?? 1;
}

let redis;
if (!process.env.REDIS_URL && hasRedisServer()) {
  const server = await startRedisServer(['--maxmemory-policy', 'noeviction']);
  redis = {
    url: server.url,
    version: await probe(server.url),
    source: `a throwaway redis-server on port ${server.port}`,
    stop: server.stop,
  };
} else {
  redis = await findRedis();
}
console.log(`bench uses Redis ${redis.version} at ${redis.url} (${redis.source})`);

// What each durability setting costs: servers with AOF (on the real disk, in the project directory,
// not a tmpfs where fsync is free) and a primary with a replica. Only when redis-server is installed.
const extra = [];
const env = { ...process.env, REDIS_URL: redis.url, BENCH_REDIS_SOURCE: redis.source };
const dataDir = mkdtempSync(join(process.cwd(), '.bench-data-'));
const aof = async (name, fsync, args = []) => {
  const dir = mkdtempSync(join(dataDir, `${name}-`));
  const server = await startRedisServer(['--dir', dir, '--appendonly', 'yes', '--appendfsync', fsync, ...args]);
  extra.push(server);
  return server;
};
// The latency rows run again on AOF everysec (every library on the same server).
if (hasRedisServer()) env.BENCH_AOF_EVERYSEC_URL = (await aof('everysec', 'everysec')).url;
if (hasRedisServer() && process.env.BENCH_DURABILITY !== '0') {
  env.BENCH_AOF_ALWAYS_URL = (await aof('always', 'always')).url;
  const replicate = async (primary, fsync) => {
    const dir = mkdtempSync(join(dataDir, 'replica-'));
    const args = fsync ? ['--appendonly', 'yes', '--appendfsync', fsync] : [];
    const replica = await startRedisServer(['--dir', dir, ...args, '--replicaof', '127.0.0.1', String(primary.port)]);
    extra.push(replica);
    for (let i = 0; i < 200; i++) {
      const info = await probeReplication(replica.url);
      if (info === 'up') return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`replica of ${primary.url} did not sync`);
  };
  const primary = await startRedisServer([
    '--dir',
    mkdtempSync(join(dataDir, 'primary-')),
    '--repl-diskless-sync-delay',
    '0',
  ]);
  extra.push(primary);
  await replicate(primary);
  env.BENCH_REPLICATED_URL = primary.url;
  const primaryAlways = await aof('primary-always', 'always', ['--repl-diskless-sync-delay', '0']);
  await replicate(primaryAlways, 'always');
  env.BENCH_REPLICATED_ALWAYS_URL = primaryAlways.url;
}

// The per-node rows: a Cluster of 3 primaries, slots split evenly (bench/nodes.ts).
if (hasRedisServer() && process.env.BENCH_CLUSTER !== '0') {
  const dir = mkdtempSync(join(dataDir, 'cluster-'));
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    const node = await startRedisServer(clusterNodeArgs(i, dir));
    extra.push(node);
    nodes.push(node);
  }
  await createCluster(nodes);
  env.BENCH_CLUSTER_PORTS = nodes.map((node) => node.port).join(',');
}

async function probeReplication(url) {
  const { Redis } = await import('ioredis');
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0 });
  try {
    await client.connect();
    return /master_link_status:(\S+)/.exec(await client.info('replication'))?.[1];
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}
let status = run(['scripts/embed-lua.mjs']);
if (status === 0) status = run(['scripts/clean.mjs', '.bench-build']);
if (status === 0) status = run([require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.bench.json']);
if (status === 0) {
  status = run(['.bench-build/bench/main.js'], env);
}
await Promise.all(extra.map((server) => server.stop()));
rmSync(dataDir, { recursive: true, force: true });
await redis.stop();
process.exit(status);
