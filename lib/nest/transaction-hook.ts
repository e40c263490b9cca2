import { AsyncLocalStorage } from 'node:async_hooks';
import type { OutboxRow } from '../core/outbox/outbox-store.js';

/** What one transaction of the host wrote for Redis: rows (after-commit mode) and whether anything was written. */
export interface CommitScope {
  readonly rows: OutboxRow[];
  wrote: boolean;
}

type Wrap = (options: unknown, fn: (...args: unknown[]) => Promise<unknown>, ...rest: unknown[]) => Promise<unknown>;

interface HostOptions {
  wrapWithTransaction?: Wrap;
  wrapWithNestedTransaction?: Wrap;
}

const scopes = new AsyncLocalStorage<CommitScope>();
const HOOKED = Symbol.for('nestjs-redis-tasks.commitHook');

/** The scope of the transaction the caller runs in (undefined outside, or when the host is not hooked). */
export function commitScope(): CommitScope | undefined {
  return scopes.getStore();
}

/**
 * Hooks the commits of a `@nestjs-cls/transactional` transaction host: its adapter's transaction wrappers
 * (the options it was made with; `@nestjs-cls/transactional` has no commit hook of its own) run each
 * transaction in a scope of ours, and `onCommit` gets the scope once the outermost transaction committed
 * (never after a rollback). A nested transaction (a savepoint) keeps a scope of its own, merged into its
 * parent's when it succeeded and dropped when it rolled back. False when the host has no wrapper to hook
 * (another major version): the caller then works without it.
 */
export function hookCommits(host: unknown, onCommit: (scope: CommitScope) => void): boolean {
  const options = (host as { _options?: HostOptions } | undefined)?._options;
  const outer = options?.wrapWithTransaction;
  if (!options || typeof outer !== 'function') return false;
  const existing = (options as Record<symbol, unknown>)[HOOKED] as ((scope: CommitScope) => void)[] | undefined;
  if (existing) {
    existing.push(onCommit); // one wrapper per host: a second module's hook joins it
    return true;
  }
  const hooks: ((scope: CommitScope) => void)[] = [onCommit];
  Object.defineProperty(options, HOOKED, { value: hooks });
  options.wrapWithTransaction = async function (this: unknown, txOptions, fn, ...rest) {
    const scope: CommitScope = { rows: [], wrote: false };
    const result = await scopes.run(scope, () => outer.call(this, txOptions, fn, ...rest));
    for (const hook of hooks) hook(scope);
    return result;
  };
  const nested = options.wrapWithNestedTransaction;
  if (typeof nested === 'function') {
    options.wrapWithNestedTransaction = async function (this: unknown, txOptions, fn, ...rest) {
      const parent = scopes.getStore();
      const scope: CommitScope = { rows: [], wrote: false };
      const result = await scopes.run(scope, () => nested.call(this, txOptions, fn, ...rest));
      if (parent) {
        parent.rows.push(...scope.rows);
        parent.wrote ||= scope.wrote;
      }
      return result;
    };
  }
  return true;
}
