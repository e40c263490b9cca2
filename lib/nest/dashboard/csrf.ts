import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** How long a page's token is accepted (ms). */
const TOKEN_TTL_MS = 12 * 60 * 60 * 1000;

type Headers = Readonly<Record<string, string | string[] | undefined>>;

/** What a request to the dashboard is: the page itself, one of its reads, or an action. */
export type DashboardRequest = 'page' | 'read' | 'action';

/** Which host names the dashboard answers to, and whether a proxy's forwarded host is believed. */
export interface OriginPolicy {
  /**
   * Host names (with port when not 80/443) the dashboard may be reached under; anything else is refused,
   * so a DNS-rebinding page (its own host name resolved to this app) cannot use it. Default: any.
   */
  readonly allowedHosts?: readonly string[];
  /** Believe `X-Forwarded-Host` (set only when a proxy you run replaces it). Default false: a browser can send it. */
  readonly trustProxy?: boolean;
}

/**
 * The dashboard's defence against other sites, in layers, none of them trusting a header a page of
 * another site can set:
 * - every route (reads included) answers only its own origin: a browser's `Sec-Fetch-Site` must say
 *   `same-origin` (or, for the page itself, a navigation: a link or a typed address), and an `Origin`,
 *   when sent, must name the host the request was sent to. Under `app.enableCors()` a foreign page could
 *   otherwise read the dashboard, its payloads and its token;
 * - the host must be one of `allowedHosts` when set (DNS rebinding);
 * - an action must also come from the dashboard's origin by `Origin` or `Referer`, and carry the token the
 *   page was served with (an HMAC of when it was issued). Stateless: no session or cookie.
 * `X-Forwarded-Host` is believed only with `trustProxy`.
 */
export class CsrfTokens {
  private readonly key: Buffer;

  constructor(
    secret?: string,
    private readonly policy: OriginPolicy = {},
  ) {
    this.key = secret === undefined ? randomBytes(32) : Buffer.from(secret, 'utf8');
  }

  /** A fresh token for a page. */
  issue(now = Date.now()): string {
    const body = `${now.toString(36)}.${randomBytes(12).toString('base64url')}`;
    return `${body}.${this.sign(body)}`;
  }

  /** Why a request of this kind is refused, or undefined when it may proceed. */
  refusal(headers: Headers, kind: DashboardRequest = 'action', now = Date.now()): string | undefined {
    const host = (
      this.policy.trustProxy
        ? (first(headers['x-forwarded-host'])?.split(',')[0].trim() ?? first(headers.host))
        : first(headers.host)
    )?.toLowerCase();
    if (!host) return 'the request names no host';
    const allowed = this.policy.allowedHosts;
    if (allowed && !allowed.some((name) => name.toLowerCase() === host))
      return `the host "${host}" is not one of the dashboard's allowedHosts`;
    const site = first(headers['sec-fetch-site']);
    const navigation = kind === 'page' && first(headers['sec-fetch-mode']) === 'navigate';
    if (site !== undefined && site !== 'same-origin' && !(navigation || (kind === 'page' && site === 'none'))) {
      return "the request does not come from the dashboard's own origin";
    }
    const origin = first(headers.origin);
    if (origin !== undefined && origin !== 'null' && hostOf(origin) !== host)
      return "the request does not come from the dashboard's own origin";
    if (origin === 'null' && kind !== 'page') return "the request does not come from the dashboard's own origin";
    if (kind !== 'action') return undefined;
    const from = origin ?? first(headers.referer);
    if (!from || hostOf(from) !== host) return "the request does not come from the dashboard's own origin";
    const token = first(headers['x-csrf-token']);
    if (!token || !this.valid(token, now)) return 'the request has no valid anti-CSRF token (reload the page)';
    return undefined;
  }

  private valid(token: string, now: number): boolean {
    const parts = token.split('.');
    if (parts.length !== 3) return false;
    const body = `${parts[0]}.${parts[1]}`;
    const expected = Buffer.from(this.sign(body));
    const given = Buffer.from(parts[2]);
    if (expected.length !== given.length || !timingSafeEqual(expected, given)) return false;
    const issued = parseInt(parts[0], 36);
    return Number.isFinite(issued) && issued <= now + 60_000 && now - issued < TOKEN_TTL_MS;
  }

  private sign(body: string): string {
    return createHmac('sha256', this.key).update(body).digest('base64url');
  }
}

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function hostOf(url: string): string | undefined {
  try {
    return new URL(url).host.toLowerCase();
  } catch {
    return undefined;
  }
}
