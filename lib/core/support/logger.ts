import { printable } from './describe.js';
/** What the core needs from a logger; Nest's `Logger` fits as it is. */
export interface TaskLogger {
  log(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  debug?(message: string): void;
}

/**
 * Reports an outage once when it starts and once when it ends, with its length, instead of one line
 * per failed attempt.
 */
export class OutageReporter {
  private since: number | undefined;

  constructor(
    private readonly logger: TaskLogger,
    private readonly what: string,
    /** When the connection was lost, if known: an outage starts then, not at the first failed command. */
    private readonly downSince?: () => number | undefined,
  ) {}

  get down(): boolean {
    return this.since !== undefined;
  }

  failed(error: unknown): void {
    if (this.since === undefined) {
      const now = Date.now();
      this.since = Math.min(now, this.downSince?.() ?? now);
      const message = errorMessage(error);
      // A refused permission is no outage: say what would fix it (it is retried, in case it is granted).
      this.logger.error(
        message.startsWith('NOPERM') || message.includes("The user executing the script can't")
          ? `${this.what} failed: ${message}; the Redis ACL user lacks a permission this library needs (aclRule(prefix) gives the rule); retrying until it is granted`
          : `${this.what} failed: ${message}; retrying until Redis answers`,
      );
    }
  }

  succeeded(): void {
    if (this.since !== undefined) {
      this.logger.log(`${this.what} recovered: it was down for ${Date.now() - this.since} ms`);
      this.since = undefined;
    }
  }
}

export function errorMessage(error: unknown): string {
  // Never throws, whatever `error` is (a Proxy whose traps throw included): it is called in catch blocks.
  try {
    return error instanceof Error ? String(error.message) : String(error);
  } catch {
    try {
      return Object.prototype.toString.call(error);
    } catch {
      return 'an error that cannot be described';
    }
  }
}

/** A delay that ends early when the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * A logger whose lines are safe whatever Redis held: control characters in task ids, client ids or
 * error texts read from Redis are escaped (no forged log lines, no terminal escapes), lines capped.
 */
export function printableLogger(logger: TaskLogger): TaskLogger {
  return {
    log: (message) => logger.log(printable(message)),
    warn: (message) => logger.warn(printable(message)),
    error: (message) => logger.error(printable(message)),
    ...(logger.debug ? { debug: (message: string) => logger.debug?.(printable(message)) } : {}),
  };
}

/** Resolves true when `work` settled by `deadline` (Date.now() ms), false when the deadline came first. */
export async function settledBy(work: Promise<unknown>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, deadline - Date.now()));
  });
  try {
    return await Promise.race([
      work.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** A logger that says nothing (a part whose caller reports what matters itself). */
export const silentLogger: TaskLogger = { log: () => undefined, warn: () => undefined, error: () => undefined };
