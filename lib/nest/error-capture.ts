import { BaseRpcExceptionFilter, RpcException } from '@nestjs/microservices';
import type { ArgumentsHost } from '@nestjs/common';
import { throwError } from 'rxjs';
import { RedisTaskContext } from './redis-task.context.js';

/** What each run's handler threw (boxed: `throw undefined` is a throw too). */
const captured = new WeakMap<RedisTaskContext, { readonly thrown: unknown }>();
let installed = false;

/**
 * Nest's base RPC exception filter replaces any error that is not an `RpcException` with
 * `{ status: 'error', message: 'Internal server error' }` before the transport sees it. That is right
 * for what a `send()` caller receives, but dead letters need the handler's own error (message, stack,
 * class). The filter's host carries the handler's arguments, our context among them, so the original
 * error is recorded against the context on its way through. Errors handled by a user's own filter
 * never reach the base filter; for those, what the filter returns is recorded instead. A handler's own
 * decision (retry later, dead-letter now) is not logged as an error here.
 */
export function installErrorCapture(): void {
  if (installed) {
    return;
  }
  installed = true;
  const prototype = BaseRpcExceptionFilter.prototype as { catch(exception: unknown, host: ArgumentsHost): unknown };
  const original = prototype.catch;
  prototype.catch = function catchAndRecord(this: unknown, exception: unknown, host: ArgumentsHost) {
    const context = host?.getArgByIndex?.(1);
    if (context instanceof RedisTaskContext) {
      captured.set(context, { thrown: exception });
      // The worker logs each failed attempt once, at WARN, saying what happens next (retry, dead letter; a
      // handler's own decision, RetryTaskError or DeadLetterTaskError, at LOG), with the stack at debug. The
      // base filter would log an ERROR with the stack first, a second line for the same attempt; what it
      // answers for an error that is not an RpcException is this.
      if (!(exception instanceof RpcException))
        return throwError(() => ({ status: 'error', message: 'Internal server error' }));
    }
    return original.call(this, exception, host);
  };
}

/** The handler's own error for this run (`{ thrown }`, whatever value it was), if the base filter saw it. */
export function capturedError(context: RedisTaskContext): { readonly thrown: unknown } | undefined {
  return captured.get(context);
}
