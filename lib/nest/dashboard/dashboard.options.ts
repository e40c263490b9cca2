import type { CanActivate, ModuleMetadata, Type } from '@nestjs/common';
import type { RedisTaskConnection } from '../../core/config/options.js';
import { InvalidOptionError } from '../../core/model/errors.js';

/** What the dashboard reads and how it behaves (the part `forRootAsync` builds in a factory). */
export interface RedisTaskDashboardSettings {
  /** The Redis the queues live in (as for `RedisTaskClient`). Default `redis://127.0.0.1:6379`. */
  connection?: RedisTaskConnection;
  /** The key prefix of the queues to show. Default `tasks`. */
  prefix?: string;
  /**
   * Enable the buttons that change state (pause, resume, requeue and purge dead letters). Default false:
   * read-only. Needs a `guard` (or `allowActionsWithoutGuard: true`).
   */
  actions?: boolean;
  /** How often the page refreshes what it shows, in ms (1,000 to 60,000). Default 2,000. */
  refreshMs?: number;
  /**
   * Show dead letters' payloads (they may hold personal data). Default false. Like `actions`, needs a
   * `guard` (or `allowPayloadsWithoutGuard: true`): anyone who reaches the routes could read them.
   */
  showPayloads?: boolean;
  /**
   * Host names (with the port when it is not 80/443) the dashboard may be reached under, e.g.
   * `['ops.example.com', 'localhost:3000']`; other hosts are refused, which stops DNS rebinding (another
   * site's host name pointed at this app). Default: any host.
   */
  allowedHosts?: string[];
  /** Believe `X-Forwarded-Host` (only behind a proxy of yours that sets it). Default false. */
  trustProxy?: boolean;
  /**
   * The key of the page's anti-CSRF tokens (at least 32 characters). Default: random per process, so set
   * it when several instances serve the dashboard behind one address.
   */
  csrfSecret?: string;
  /** The page's title. Default `Queues`. */
  title?: string;
}

/** What must be known when the module is defined: where it is mounted and who may use it. */
export interface RedisTaskDashboardMount {
  /** Where the dashboard is mounted on the app's HTTP server (after any global prefix). Default `queues`. */
  path?: string;
  /**
   * A Nest guard (a class the module instantiates, or an instance) every request of the dashboard must
   * pass, e.g. the app's own auth guard. Required when `actions` is on.
   */
  guard?: Type<CanActivate> | CanActivate;
  /** Opt out, by name, of the rule that actions need a guard (e.g. the dashboard sits behind a VPN-only proxy). */
  allowActionsWithoutGuard?: boolean;
  /** Opt out, by name, of the rule that showing payloads needs a guard. */
  allowPayloadsWithoutGuard?: boolean;
  /** Modules the guard's dependencies come from. */
  imports?: ModuleMetadata['imports'];
}

export type RedisTaskDashboardOptions = RedisTaskDashboardSettings & RedisTaskDashboardMount;

export interface RedisTaskDashboardAsyncOptions extends RedisTaskDashboardMount {
  useFactory: (...args: never[]) => RedisTaskDashboardSettings | Promise<RedisTaskDashboardSettings>;
  inject?: unknown[];
}

/** The settings with their defaults (connection and prefix are checked by the client they open). */
export interface ResolvedDashboardSettings {
  readonly connection?: RedisTaskConnection;
  readonly prefix?: string;
  readonly actions: boolean;
  readonly refreshMs: number;
  readonly showPayloads: boolean;
  readonly csrfSecret?: string;
  readonly title: string;
  readonly allowedHosts?: readonly string[];
  readonly trustProxy: boolean;
}

/** The mount point, normalized (no leading or trailing slash); refused when it is not a plain path. */
export function resolvePath(path: unknown = 'queues'): string {
  if (
    typeof path !== 'string' ||
    !/^\/?[A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*\/?$/.test(path) ||
    path.split('/').some((part) => part === '.' || part === '..')
  ) {
    throw new InvalidOptionError(
      'path',
      'must be a URL path of segments of letters, digits and . _ ~ - (not "." or ".."), e.g. "admin/queues"',
    );
  }
  return path.replace(/^\/|\/$/g, '');
}

/** `allowedHosts`, when given: a non-empty list of host names. */
function validateAllowedHosts(allowedHosts: unknown): void {
  if (
    allowedHosts !== undefined &&
    (!Array.isArray(allowedHosts) ||
      allowedHosts.length === 0 ||
      !allowedHosts.every((host) => typeof host === 'string' && /^[A-Za-z0-9.[\]:-]+$/.test(host)))
  ) {
    throw new InvalidOptionError(
      'allowedHosts',
      'must be a non-empty list of host names (with ":port" when not 80/443), e.g. ["ops.example.com", "localhost:3000"]',
    );
  }
}

/** Checks the settings (each bad one named) and refuses actions without a guard unless opted out. */
export function resolveSettings(
  settings: RedisTaskDashboardSettings,
  mount: RedisTaskDashboardMount,
): ResolvedDashboardSettings {
  const {
    actions = false,
    refreshMs = 2_000,
    showPayloads = false,
    csrfSecret,
    title = 'Queues',
    allowedHosts,
    trustProxy = false,
  } = settings;
  if (typeof trustProxy !== 'boolean') throw new InvalidOptionError('trustProxy', 'must be true or false');
  validateAllowedHosts(allowedHosts);
  if (showPayloads === true && !mount.guard && mount.allowPayloadsWithoutGuard !== true) {
    throw new InvalidOptionError(
      'showPayloads',
      'needs option "guard" (the app\'s own CanActivate): anyone who can reach the dashboard could otherwise read ' +
        'dead letters\' payloads. Pass "allowPayloadsWithoutGuard: true" to opt out.',
    );
  }
  if (typeof actions !== 'boolean') throw new InvalidOptionError('actions', 'must be true or false');
  if (typeof showPayloads !== 'boolean') throw new InvalidOptionError('showPayloads', 'must be true or false');
  if (!Number.isInteger(refreshMs) || refreshMs < 1_000 || refreshMs > 60_000) {
    throw new InvalidOptionError('refreshMs', 'must be an integer from 1000 to 60000');
  }
  if (csrfSecret !== undefined && (typeof csrfSecret !== 'string' || csrfSecret.length < 32)) {
    throw new InvalidOptionError('csrfSecret', 'must be a string of at least 32 characters');
  }
  if (typeof title !== 'string' || title.length === 0 || title.length > 100) {
    throw new InvalidOptionError('title', 'must be a string of 1 to 100 characters');
  }
  if (actions && !mount.guard && mount.allowActionsWithoutGuard !== true) {
    throw new InvalidOptionError(
      'actions',
      'needs option "guard" (the app\'s own CanActivate, e.g. its auth guard): anyone who can reach the page could otherwise ' +
        'pause queues and purge dead letters. Pass "allowActionsWithoutGuard: true" to opt out.',
    );
  }
  return {
    connection: settings.connection,
    prefix: settings.prefix,
    actions,
    refreshMs,
    showPayloads,
    csrfSecret,
    title,
    allowedHosts,
    trustProxy,
  };
}
