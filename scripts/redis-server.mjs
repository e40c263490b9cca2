// Finds a Redis for the sample and the tests: REDIS_URL if set, else 127.0.0.1:6379 if it answers,
// else a throwaway redis-server from PATH on a free loopback port (stopped by pid afterwards).
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';

const HOW_TO_GET_REDIS =
  'No Redis found. Set REDIS_URL (e.g. redis://127.0.0.1:6379), start Redis on 127.0.0.1:6379, ' +
  'or install redis-server (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis).';

/** PING with a short timeout; resolves to the server version, or undefined when nothing answers. */
export async function probe(url, timeoutMs = 1000) {
  const redis = new Redis(url, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
    // A probe of a port nobody answers yet must not keep the process alive (default: a 2 s timer).
    disconnectTimeout: 10,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    await redis.ping();
    const info = await redis.info('server');
    return /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export function hasRedisServer() {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

/**
 * Starts redis-server on a loopback port (a free one unless given) with the given extra arguments;
 * returns { url, port, pid, stop, kill } (kill: SIGKILL, as a crash). With `configFile` (which
 * redis-server wants first), it is started from that file, e.g. as a Sentinel with `--sentinel`.
 */
export async function startRedisServer(extraArgs = [], port = undefined, configFile = undefined) {
  // An AOF or RDB written to the working directory lands in the checkout, shared by every suite's Redis there.
  const persists = extraArgs.some(
    (arg, i) => (arg === '--appendonly' || arg === '--save') && extraArgs[i + 1] !== 'no' && extraArgs[i + 1] !== '',
  );
  if (persists && !extraArgs.includes('--dir') && configFile === undefined) {
    throw new Error('startRedisServer: --appendonly / --save need a --dir of their own (e.g. a mkdtemp directory)');
  }
  port ??= await freePort();
  const child = spawn(
    'redis-server',
    [
      ...(configFile ? [configFile] : []),
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      ...(extraArgs.includes('--sentinel') ? [] : ['--save', '', '--appendonly', 'no']),
      ...extraArgs,
    ],
    { stdio: 'ignore', detached: false },
  );
  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`redis-server exited with code ${child.exitCode} before answering on port ${port}`);
    }
    if (await probe(url, 200)) {
      return {
        url,
        port,
        pid: child.pid,
        stop: () => signal(child, 'SIGTERM'),
        kill: () => signal(child, 'SIGKILL'),
      };
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  child.kill('SIGKILL');
  throw new Error(`redis-server did not answer on port ${port} within 10 s`);
}

function signal(child, name) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill(name);
  });
}

/** Resolves { url, version, source, stop } or throws with instructions to get Redis. */
export async function findRedis() {
  if (process.env.REDIS_URL) {
    const version = await probe(process.env.REDIS_URL, 3000);
    if (!version) {
      throw new Error(`REDIS_URL is set to ${process.env.REDIS_URL}, but nothing answers PING there.`);
    }
    return { url: process.env.REDIS_URL, version, source: 'REDIS_URL', stop: async () => undefined };
  }
  const local = 'redis://127.0.0.1:6379';
  const version = await probe(local);
  if (version) {
    return { url: local, version, source: '127.0.0.1:6379', stop: async () => undefined };
  }
  if (hasRedisServer()) {
    const server = await startRedisServer();
    return {
      url: server.url,
      version: await probe(server.url),
      source: `throwaway redis-server (pid ${server.pid})`,
      stop: server.stop,
    };
  }
  throw new Error(HOW_TO_GET_REDIS);
}

/**
 * A field of a server's INFO `section` (or, for section 'cluster', of CLUSTER INFO), or undefined when
 * the server does not answer.
 */
export async function infoField(port, section, field) {
  const redis = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    const text = section === 'cluster' ? await redis.call('CLUSTER', 'INFO') : await redis.info(section);
    return new RegExp(`^${field}:(\\S+)`, 'm').exec(text)?.[1];
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
}

/** The arguments that make server `i` of a Cluster whose files are in `dir` a cluster node. */
export function clusterNodeArgs(i, dir) {
  return ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${i}.conf`, '--dir', dir];
}

/** Waits until every server (started with --cluster-enabled yes) reports cluster_state ok (30 s at most each). */
export async function clusterOk(servers) {
  for (const server of servers) {
    const deadline = Date.now() + 30_000;
    while ((await infoField(server.port, 'cluster', 'cluster_state')) !== 'ok') {
      if (Date.now() > deadline) throw new Error(`cluster node ${server.port} did not report state ok within 30 s`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/**
 * Makes a Redis Cluster of servers started with --cluster-enabled yes: slots split evenly over the
 * first servers by `redis-cli --cluster create`, `replicas` replicas each; resolves once every node
 * reports state ok.
 */
export async function createCluster(servers, replicas = 0) {
  const created = spawnSync(
    'redis-cli',
    [
      '--cluster',
      'create',
      ...servers.map((server) => `127.0.0.1:${server.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ],
    { encoding: 'utf8', timeout: 30_000 },
  );
  if (created.status !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
  await clusterOk(servers);
}
