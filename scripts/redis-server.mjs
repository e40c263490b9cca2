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

/**
 * Ports handed out by this process: never handed out again, so a port a test keeps for a restart (a server
 * killed, then started again on its port) is not given to another server of the same process meanwhile.
 */
const handedOut = new Set();
/**
 * Each Jest worker picks from a block of its own, below the kernel's ephemeral range (32768 and up on Linux,
 * where `listen(0)` ports and client sockets come from): suites running at once in other workers never pick
 * the same port, so one's restart cannot find its port taken by another's new server. A port's cluster bus
 * (+10 000) stays in the block's own range too.
 */
const PORT_BLOCKS = 20;
const PORT_BLOCK = 500;
const FIRST_PORT = 11_000;

/** Whether the port (and its cluster bus port) can be bound on loopback now. */
function bindable(port) {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A loopback port nothing listens on, from this process's block (see PORT_BLOCKS), never handed out before. */
export async function freePort() {
  const worker = Number(process.env.JEST_WORKER_ID) || 0;
  const first = FIRST_PORT + (worker % PORT_BLOCKS) * PORT_BLOCK;
  for (let tries = 0; tries < 200; tries++) {
    const port = first + Math.floor(Math.random() * PORT_BLOCK);
    if (handedOut.has(port)) continue;
    handedOut.add(port); // before the checks: concurrent calls never pick the same one
    if ((await bindable(port)) && (await bindable(port + 10_000))) return port;
  }
  throw new Error(`no free loopback port in ${first}-${first + PORT_BLOCK - 1}`);
}

/** The process id of the Redis answering at `url` (INFO server), or undefined. */
async function answeringPid(url) {
  const redis = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    disconnectTimeout: 10,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    return Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]);
  } catch {
    return undefined;
  } finally {
    redis.disconnect();
  }
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
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOn(extraArgs, port ?? (await freePort()), configFile);
    } catch (error) {
      // Another process took a free port first: another one. A port asked for (a restart) is an error.
      if (!(error instanceof PortTakenError) || port !== undefined || attempt === 5) throw error;
    }
  }
}

/** The port was answered by a server that is not the one started (another process holds it). */
class PortTakenError extends Error {}

async function startOn(extraArgs, port, configFile) {
  // An AOF or RDB written to the working directory lands in the checkout, shared by every suite's Redis there.
  const persists = extraArgs.some(
    (arg, i) => (arg === '--appendonly' || arg === '--save') && extraArgs[i + 1] !== 'no' && extraArgs[i + 1] !== '',
  );
  if (persists && !extraArgs.includes('--dir') && configFile === undefined) {
    throw new Error('startRedisServer: --appendonly / --save need a --dir of their own (e.g. a mkdtemp directory)');
  }
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
      // Answered: by this server, or by another that holds the port (this one then fails to bind and exits).
      const pid = await answeringPid(url);
      if (pid !== child.pid) {
        child.kill('SIGKILL');
        throw new PortTakenError(
          `port ${port} is held by another Redis (pid ${pid}), not the redis-server started on it`,
        );
      }
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
