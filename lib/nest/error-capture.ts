import { BaseRpcExceptionFilter } from '@nestjs/microservices';
import type { ArgumentsHost } from '@nestjs/common';
import { throwError } from 'rxjs';
import { requestOf } from '../core/model/errors.js';
import { RedisTaskContext } from './redis-task.context.js';

const captured = new WeakMap<RedisTaskContext, unknown>();
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
      captured.set(context, exception);
      // A RetryTaskError or DeadLetterTaskError is the handler deciding its task's outcome, not a failure:
      // the worker logs it once, at LOG/WARN, without a stack. The base filter would log it as an ERROR
      // with its stack first; what it would answer is the same.
      if (requestOf(exception) !== undefined)
        return throwError(() => ({ status: 'error', message: 'Internal server error' }));
    }
    return original.call(this, exception, host);
  };
}

/** The handler's own error for this run, if the base filter saw it. */
export function capturedError(context: RedisTaskContext): unknown {
  return captured.get(context);
}
