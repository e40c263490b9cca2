/**
 * Secrets and payloads never leave through errors or log lines: URLs lose their credentials, and Redis
 * errors lose the command arguments ioredis attaches to them (an AUTH password, a whole task entry),
 * which any `console.error(error)` would otherwise print.
 */

/** A URL with its password (and user name) replaced; a string that is no URL is cut short instead. */
export function redactUrl(value: string): string {
  // The user info ends at the last "@" (a password may hold an unencoded "@", which ioredis accepts): hiding
  // up to the first one showed the rest of the password.
  const credentials = /^([a-z][a-z0-9+.-]*:\/\/)([^\s]*)@/i;
  if (credentials.test(value)) {
    return value.replace(
      credentials,
      (_match, scheme: string, userInfo: string) =>
        `${scheme}${userInfo.includes(':') ? `${userInfo.split(':')[0]}:***` : '***'}@`,
    );
  }
  // Without an "@" there are no credentials to hide; with one in something that is no URL, the password
  // may stand anywhere: show its shape only.
  if (!value.includes('@')) return value.length > 200 ? `${value.slice(0, 200)}…` : value;
  return `${value.slice(0, 8)}… (${value.length} characters, hidden: it may hold a password)`;
}

/**
 * Removes what ioredis attaches to a failed command (`command.args`, the arguments as sent) and returns
 * the same error, its class, code and message kept. Safe on anything.
 */
export function scrubRedisError<T>(error: T): T {
  if (typeof error === 'object' && error !== null) {
    try {
      const command = (error as { command?: { name?: unknown } }).command;
      if (command && typeof command === 'object') {
        Object.defineProperty(error, 'command', {
          value: { name: command.name },
          enumerable: false,
          configurable: true,
          writable: true,
        });
      }
      const previous = (error as { previousErrors?: unknown[] }).previousErrors;
      if (Array.isArray(previous)) previous.forEach((inner) => scrubRedisError(inner));
    } catch {
      // A frozen or exotic object: nothing more to remove.
    }
  }
  return error;
}

/** Awaits `work`, scrubbing a rejection's Redis command arguments. */
export async function scrubbed<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    throw scrubRedisError(error);
  }
}

/** The same object, with every method's rejection scrubbed of Redis command arguments. */
export function scrubbing<T extends object>(target: T): T {
  return new Proxy(target, {
    get(object, property, receiver) {
      const value: unknown = Reflect.get(object, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const result: unknown = (value as (...inner: unknown[]) => unknown).apply(object, args);
        return result instanceof Promise ? scrubbed(result) : result;
      };
    },
  });
}
