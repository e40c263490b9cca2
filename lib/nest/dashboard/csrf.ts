import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** How long a page's token is accepted (ms). */
const TOKEN_TTL_MS = 12 * 60 * 60 * 1000;

/**
 * The dashboard's defence against cross-site request forgery, in two layers: a state-changing request
 * must come from the dashboard's own origin (its `Origin`, or else `Referer`, names the host it was sent
 * to), and must carry the token the page was served with (an HMAC of when it was issued, which a page of
 * another site cannot read). Stateless: no session or cookie is needed.
 */
export class CsrfTokens {
  private readonly key: Buffer;

  constructor(secret?: string) {
    this.key = secret === undefined ? randomBytes(32) : Buffer.from(secret, 'utf8');
  }

  /** A fresh token for a page. */
  issue(now = Date.now()): string {
    const body = `${now.toString(36)}.${randomBytes(12).toString('base64url')}`;
    return `${body}.${this.sign(body)}`;
  }

  /** Why the request is refused, or undefined when it may proceed. */
  refusal(headers: Readonly<Record<string, string | string[] | undefined>>, now = Date.now()): string | undefined {
    const host = first(headers['x-forwarded-host']) ?? first(headers.host);
    const from = first(headers.origin) ?? first(headers.referer);
    if (!host || !from || hostOf(from) !== host.toLowerCase()) return 'the request does not come from the dashboard\'s own origin';
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
