/**
 * Real multi-process Redis topologies for the cluster and high-availability tests: a Redis Cluster of
 * N primaries, a primary with a replica, and a Sentinel watching them. Every server runs on a free
 * loopback port from `redis-server` on PATH, in its own temporary directory, and is stopped by pid.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  clusterNodeArgs,
  clusterOk,
  createCluster,
  infoField,
  startRedisServer,
  type RedisServer,
} from '../../scripts/redis-server.mjs';
import { waitFor } from './redis.js';

export interface Topology {
  readonly servers: RedisServer[];
  stop(): Promise<void>;
}

function stopAll(servers: RedisServer[], dir: string): () => Promise<void> {
  return async () => {
    await Promise.all(servers.map((server) => server.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
}

/**
 * A Redis Cluster of `primaries` primaries, slots split evenly by `redis-cli --cluster create`, with
 * `replicas` replicas each (servers `primaries` and on; none by default). With `aof`, every write is
 * fsynced to each node's append-only file, and `restart(i)` kills node i and starts it again on its port
 * from its files (its cluster config and AOF), once the cluster is ok again.
 */
export async function startCluster(
  primaries = 3,
  options: { aof?: boolean; replicas?: number } = {},
): Promise<
  Topology & { nodes: { host: string; port: number }[]; servers: RedisServer[]; restart(i: number): Promise<void> }
> {
  const replicas = options.replicas ?? 0;
  const dir = mkdtempSync(join(tmpdir(), 'nrt-cluster-'));
  const servers: RedisServer[] = [];
  const stop = stopAll(servers, dir);
  const argsOf = (i: number) => [
    ...clusterNodeArgs(i, dir),
    '--cluster-node-timeout',
    '2000',
    ...(options.aof ? ['--appendonly', 'yes', '--appendfsync', 'always', '--appenddirname', `aof-${i}`] : []),
  ];
  const restart = async (i: number) => {
    await servers[i].kill();
    servers[i] = await startRedisServer(argsOf(i), servers[i].port);
    await clusterOk(servers);
  };
  try {
    for (let i = 0; i < primaries * (1 + replicas); i++) servers.push(await startRedisServer(argsOf(i)));
    await createCluster(servers, replicas);
    return { servers, stop, restart, nodes: servers.map((server) => ({ host: '127.0.0.1', port: server.port })) };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A primary with `replicas` replicas, returned once every replica's link is up. */
export async function startReplicated(
  replicas = 1,
  primaryArgs: string[] = [],
): Promise<Topology & { primary: RedisServer; replicas: RedisServer[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'nrt-replicated-'));
  const servers: RedisServer[] = [];
  const stop = stopAll(servers, dir);
  try {
    const primary = await startRedisServer(['--dir', dir, '--repl-diskless-sync-delay', '0', ...primaryArgs]);
    servers.push(primary);
    const copies: RedisServer[] = [];
    for (let i = 0; i < replicas; i++) {
      const replica = await startRedisServer([
        '--dir',
        dir,
        '--dbfilename',
        `replica-${i}.rdb`,
        '--replicaof',
        '127.0.0.1',
        String(primary.port),
      ]);
      servers.push(replica);
      copies.push(replica);
      await waitFor(
        async () => (await infoField(replica.port, 'replication', 'master_link_status')) === 'up',
        `replica ${replica.port} to sync`,
        { timeoutMs: 20_000, intervalMs: 50 },
      );
    }
    return { servers, stop, primary, replicas: copies };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A Sentinel (quorum 1) watching `primaryPort` under the name `master`; it rewrites its own config file. */
export async function startSentinel(
  primaryPort: number,
  name = 'master',
): Promise<Topology & { sentinel: RedisServer }> {
  const dir = mkdtempSync(join(tmpdir(), 'nrt-sentinel-'));
  const config = join(dir, 'sentinel.conf');
  writeFileSync(
    config,
    [
      `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 1`,
      `sentinel down-after-milliseconds ${name} 1000`,
      `sentinel failover-timeout ${name} 10000`,
      `sentinel parallel-syncs ${name} 1`,
      `dir ${dir}`,
      '',
    ].join('\n'),
  );
  const servers: RedisServer[] = [];
  const stop = stopAll(servers, dir);
  try {
    const sentinel = await startRedisServer(['--sentinel'], undefined, config);
    servers.push(sentinel);
    return { servers, stop, sentinel };
  } catch (error) {
    await stop();
    throw error;
  }
}
