import { HandlerTimeoutError } from '../model/errors.js';
import type { TaskLogger } from '../support/logger.js';
import type { Run } from './running.js';
import type { TaskOutcome } from './worker-types.js';

/**
 * A handler's outcome, or a failure once its handler timeout passes. The handler is told through
 * ctx.signal and abandoned: its slot is freed and the run counts as a failed attempt, even if it
 * ignores the signal and goes on in the background. ctx.extendLease() moves the deadline
 * (`run.deadline`): the timer, when it fires early, waits for the new one.
 */
export async function withHandlerTimeout(
  running: Promise<TaskOutcome>,
  {
    taskId,
    queue,
    timeoutMs,
    run,
    logger,
  }: { taskId: string; queue: string; timeoutMs: number; run: Run; logger: TaskLogger },
): Promise<TaskOutcome> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<TaskOutcome>((resolve) => {
    const check = (): void => {
      const left = (run.deadline ?? 0) - Date.now();
      if (left > 0) {
        timer = setTimeout(check, left);
        return;
      }
      const error = new HandlerTimeoutError(queue, timeoutMs);
      run.abort.abort(error);
      logger.warn(`task ${taskId} of "${queue}" passed its handler timeout of ${timeoutMs} ms; abandoned as failed`);
      resolve({ status: 'failed', error });
    };
    timer = setTimeout(check, timeoutMs);
  });
  try {
    return await Promise.race([running, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
