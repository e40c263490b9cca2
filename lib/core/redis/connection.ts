import { Cluster, Redis, type ClusterNode, type ClusterOptions, type RedisOptions } from 'ioredis';
import { RedisConfigurationError } from '../model/errors.js';
import { defineScripts, type RedisConnection, type TaskRedis } from './scripts.js';

/**
 * Where Redis is: a `redis://` / `rediss://` URL, ioredis options, cluster nodes, or a connected
 * ioredis instance (which the library never closes; it duplicates it for blocking reads).
 */
export type RedisTaskConnection =
  string | RedisOptions | { nodes: ClusterNode[]; clusterOptions?: ClusterOptions } | Redis | Cluster;

/** A connection and whether this library opened it (and so must close it). */
export interface OwnedConnection {
  readonly redis: TaskRedis;
  readonly owned: boolean;
}

function isInstance(value: RedisTaskConnection): value is Redis | Cluster {
  // Duck-typed so an instance from another copy of ioredis is recognised too.
  return typeof (value as Redis).duplicate === 'function' && typeof (value as Redis).defineCommand === 'function';
}

/** Opens (or adopts) the connection for commands and scripts. */
export function openConnection(option: RedisTaskConnection, connectionName: string): OwnedConnection {
  if (isInstance(option)) {
    return { redis: defineScripts(option), owned: false };
  }
  let redis: RedisConnection;
  if (typeof option === 'string') {
    redis = new Redis(option, { connectionName });
  } else if ('nodes' in option) {
    redis = new Cluster(option.nodes, option.clusterOptions);
  } else {
    redis = new Redis({ connectionName, ...option });
  }
  return { redis: defineScripts(redis), owned: true };
}

/**
 * A dedicated connection for a subscriber (one in subscribed mode can do nothing else), or a blocking read.
 * Commands on it wait through reconnections instead of failing after a retry count.
 */
export function openBlockingConnection(base: RedisConnection, connectionName: string): RedisConnection {
  const connection =
    base instanceof Cluster
      ? base.duplicate(undefined, {
          // spread-ok: once per connection
          redisOptions: { ...base.options.redisOptions, connectionName, maxRetriesPerRequest: null },
        })
      : base.duplicate({ connectionName, maxRetriesPerRequest: null });
  // Its outages surface as failed commands, which their loop reports once; no unhandled 'error' events.
  connection.on('error', () => undefined);
  watchOf(connection); // watched from the start, so the watchdog knows when it was lost
  return connection;
}

/** Closes a connection this library opened; leaves a user's instance alone. */
export async function closeConnection(connection: OwnedConnection | undefined): Promise<void> {
  if (!connection?.owned) {
    return;
  }
  await quit(connection.redis);
}

/** How long a polite QUIT may take before the connection is cut (a dead peer never answers). */
const QUIT_TIMEOUT_MS = 1_000;

export async function quit(redis: RedisConnection): Promise<void> {
  if (redis.status === 'end') {
    return;
  }
  let timer: NodeJS.Timeout | undefined;
  const answered = await Promise.race([
    redis.quit().then(
      () => true,
      () => false,
    ),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), QUIT_TIMEOUT_MS);
    }),
  ]);
  clearTimeout(timer);
  if (!answered) {
    // A connection that cannot say goodbye politely is cut instead; either way it is closed.
    redis.disconnect();
    destroySockets(redis);
  }
}

/**
 * Cuts a connection's sockets at once (not a polite FIN that a dead peer never answers) so ioredis
 * reconnects and sends the commands that were waiting for a reply again.
 */
export function forceReconnect(connection: RedisConnection): void {
  destroySockets(connection, (node) => node.disconnect(true));
}

/**
 * The connection a subscriber's subscriptions are on: the subscriber itself, or for a Cluster the node
 * connection ioredis keeps them on (its ClusterSubscriber, which ioredis's typings leave out), if any now.
 */
export function subscribedNode(subscriber: RedisConnection): Redis | undefined {
  if (!(subscriber instanceof Cluster)) return subscriber;
  const inner = (subscriber as unknown as { subscriber?: { getInstance?(): Redis | null } }).subscriber;
  return inner?.getInstance?.() ?? undefined;
}

/** Destroys the sockets of a connection that is closing, so a silent peer cannot hold it open. */
function destroySockets(connection: RedisConnection, withoutSocket?: (node: Redis) => void): void {
  const nodes = connection instanceof Cluster ? connection.nodes() : [connection];
  for (const node of nodes) {
    if (node.stream && !node.stream.destroyed) node.stream.destroy();
    else withoutSocket?.(node);
  }
}

/** Where a connection option points, as host:port: never credentials, never the whole URL. */
export function describeServer(option: RedisTaskConnection): string {
  try {
    if (typeof option === 'string') {
      const url = new URL(option);
      return `${url.hostname || '127.0.0.1'}:${url.port || '6379'}`;
    }
    if (isInstance(option)) {
      if (option instanceof Cluster)
        return describeNodes((option as unknown as { startupNodes?: unknown[] }).startupNodes ?? []);
      const { host, port, path } = option.options;
      return path ?? `${host ?? '127.0.0.1'}:${port ?? 6379}`;
    }
    if ('nodes' in option) return describeNodes(option.nodes);
    return option.path ?? `${option.host ?? '127.0.0.1'}:${option.port ?? 6379}`;
  } catch {
    return 'the configured Redis';
  }
}

function describeNodes(nodes: readonly unknown[]): string {
  const named = nodes
    .slice(0, 3)
    .map((node) =>
      typeof node === 'string'
        ? describeServer(/^rediss?:/.test(node) ? node : `redis://${node}`)
        : typeof node === 'number'
          ? `127.0.0.1:${node}`
          : describeServer(node as RedisTaskConnection),
    );
  return `cluster ${named.join(', ')}${nodes.length > 3 ? ', …' : ''}`;
}

/** TLS and handshake failures that no retry heals: the trust or the protocol is configured wrong. */
const TLS_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'EPROTO',
]);
/** Connection errors that say nothing listens there (or no such host): known refused, not slow. */
const REFUSAL_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
/** Connections reset before any answer, in a row, that mean "this port speaks TLS" rather than an outage. */
const RESETS_MEANING_TLS = 3;

/**
 * What a connection has reported: its last error (message only) and, when one was seen, a cause no
 * retry heals (a refused password, an untrusted certificate, a TLS port spoken to in plain text), so
 * callers fail at once with `RedisConfigurationError` instead of retrying until a timeout.
 */
export class ConnectionWatch {
  lastError: string | undefined;
  permanent: RedisConfigurationError | undefined;
  /** When the connection was lost (first close or error since it was last ready), Date.now() ms. */
  downSince: number | undefined;
  /** When the connection's status last changed (a connect attempt began, it closed, it became ready). */
  statusSince = Date.now();
  /** When it last became ready (Date.now() ms): the commands it had in flight were sent again then. */
  readySince: number | undefined;
  private resetsBeforeReady = 0;
  private everReady = false;
  /** Whether the last connection attempt was refused (see REFUSAL_CODES); cleared once ready. */
  private refusedLast = false;

  constructor(
    private readonly connection: RedisConnection,
    readonly server: string,
  ) {
    connection.on('error', (error: Error) => {
      this.downSince ??= Date.now();
      this.saw(error);
    });
    connection.on('close', () => {
      this.downSince ??= Date.now();
    });
    // ioredis emits each status it enters as an event of that name.
    for (const status of ['connecting', 'connect', 'ready', 'close', 'reconnecting', 'end']) {
      connection.on(status, () => {
        this.statusSince = Date.now();
      });
    }
    connection.on('ready', () => {
      this.readySince = Date.now();
      this.downSince = undefined;
      this.everReady = true;
      this.resetsBeforeReady = 0;
      this.permanent = undefined;
      this.refusedLast = false;
    });
  }

  private saw(error: Error): void {
    this.lastError = error.message;
    const code = (error as { code?: unknown }).code;
    const text = error.message;
    this.refusedLast = typeof code === 'string' && REFUSAL_CODES.has(code);
    let cause: string | undefined;
    if (/^(WRONGPASS|NOAUTH|NOPERM)\b/.test(text)) {
      cause = `Redis refused the credentials or the ACL user (${text.split('\n')[0]})`;
    } else if (typeof code === 'string' && (TLS_CODES.has(code) || code.startsWith('ERR_SSL_'))) {
      cause = `the TLS connection failed (${code}: ${text}); check the certificate trust (tls.ca) and the URL scheme`;
    } else if (code === 'ECONNRESET' && !this.everReady && ++this.resetsBeforeReady >= RESETS_MEANING_TLS) {
      cause = `the server closed ${RESETS_MEANING_TLS} connections in a row before answering: it may expect TLS (use rediss://)`;
    }
    if (cause) this.permanent = new RedisConfigurationError(this.server, cause);
  }

  /**
   * Resolves once the connection is ready; rejects at once with the permanent cause when there is one,
   * else with NotReadyError after `ms`. Used so no command is handed to a connection that is down: one
   * that is not sent is known not written.
   */
  whenReady(ms: number, failFast?: { readonly refusedForMs: number }): Promise<void> {
    const { connection } = this;
    if (connection.status === 'ready') return Promise.resolve();
    if (this.permanent) return Promise.reject(this.permanent);
    if (failFast && this.knownRefused(failFast.refusedForMs)) return Promise.reject(this.refusal());
    // A user's instance made with lazyConnect waits for a first command; start it ourselves.
    if (connection.status === 'wait') void connection.connect().catch(() => undefined);
    return new Promise((resolve, reject) => {
      const waiter: ReadyWaiter = { resolve, reject, timer: undefined, failFast };
      waiter.timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new NotReadyError(this.lastError ?? `connection ${connection.status}`));
      }, ms);
      this.waiters.add(waiter);
      this.listenForReady();
    });
  }

  /**
   * Whether the connection is known refused: its last attempt found nobody listening (or no such host), and
   * it never was ready (an app started with Redis down) or has been down for `refusedForMs` (longer than a
   * restart). A caller that opted in is then told at once instead of waiting out its timeout.
   */
  knownRefused(refusedForMs: number): boolean {
    if (!this.refusedLast || this.connection.status === 'ready') return false;
    return !this.everReady || (this.downSince !== undefined && Date.now() - this.downSince >= refusedForMs);
  }

  private refusal(): RefusedError {
    return new RefusedError(this.lastError ?? 'the connection was refused');
  }

  /**
   * Every caller waiting for the connection shares one set of listeners (not three per caller: 64 emits
   * waiting through an outage tripped Node's MaxListenersExceededWarning); they go once all are answered.
   */
  // table-ok: callers waiting through an outage only (a new set once they are answered: see churn-tables)
  private waiters = new Set<ReadyWaiter>();
  private listening = false;

  private listenForReady(): void {
    if (this.listening) return;
    this.listening = true;
    const { connection } = this;
    const settle = (error?: Error) => {
      connection.off('ready', onReady);
      connection.off('end', onEnd);
      connection.off('error', onError);
      this.listening = false;
      const waiting = this.waiters;
      this.waiters = new Set();
      for (const waiter of waiting) {
        clearTimeout(waiter.timer);
        if (error) waiter.reject(error);
        else waiter.resolve();
      }
    };
    const onReady = () => settle();
    const onEnd = () => settle(new NotReadyError('the connection was closed'));
    // Listeners run in order: this watch's own classification (added first) has already run.
    const onError = () => {
      if (this.permanent) {
        settle(this.permanent);
        return;
      }
      // Refused: the callers that opted in are told now; the others wait on.
      for (const waiter of this.waiters) {
        if (waiter.failFast && this.knownRefused(waiter.failFast.refusedForMs)) {
          this.waiters.delete(waiter);
          clearTimeout(waiter.timer);
          waiter.reject(this.refusal());
        }
      }
    };
    connection.on('ready', onReady);
    connection.on('end', onEnd);
    connection.on('error', onError);
  }
}

interface ReadyWaiter {
  resolve(): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout | undefined;
  failFast: { readonly refusedForMs: number } | undefined;
}

const watches = new WeakMap<RedisConnection, ConnectionWatch>();

/**
 * Whether ioredis already knows Redis is gone and is trying again: waiting between attempts, or in an
 * attempt (after a loss) that began less than `freshMs` ago. A handshake stuck longer is not that.
 */
export function retryingAfterLoss(connection: RedisConnection, now: number, freshMs: number): boolean {
  if (connection.status === 'reconnecting') return true;
  const watch = watchOf(connection);
  return (
    watch.downSince !== undefined &&
    (connection.status === 'connecting' || connection.status === 'connect') &&
    now - watch.statusSince <= freshMs
  );
}

/** The watch of a connection (made on first use; shared by everything using that connection). */
export function watchOf(connection: RedisConnection, server = 'Redis'): ConnectionWatch {
  let watch = watches.get(connection);
  if (!watch) {
    watch = new ConnectionWatch(connection, server);
    watches.set(connection, watch);
  }
  return watch;
}

/**
 * Resolves true once the connection is ready, false if it ended first or `stopped()` says its caller gave up
 * (checked at each status change). No timer: a caller waiting on an app started with Redis down holds no handle.
 */
export async function answered(connection: RedisConnection, stopped: () => boolean): Promise<boolean> {
  for (;;) {
    if (stopped() || connection.status === 'end') return false;
    if (connection.status === 'ready') return true;
    await new Promise<void>((resolve) => {
      const done = () => {
        connection.off('ready', done);
        connection.off('end', done);
        connection.off('reconnecting', done);
        resolve();
      };
      connection.on('ready', done);
      connection.on('end', done);
      connection.on('reconnecting', done);
    });
  }
}

/** The connection did not become ready in time (internal: mapped to RedisUnavailableError by callers). */
export class NotReadyError extends Error {}

/** The connection is known refused (see ConnectionWatch.knownRefused): nothing was sent. */
export class RefusedError extends NotReadyError {}
