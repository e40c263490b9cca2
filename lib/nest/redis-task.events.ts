import type { TaskOutcomeEvent } from '../core/model/outcomes.js';
import type { ScheduleTickEvent } from '../core/schedules/tick-firer.js';
import type { TaskProgressEvent } from '../core/worker/worker-types.js';

/** Connection states reported on `RedisTaskTransport.status` and `RedisTaskClient.status`. */
export enum RedisTaskStatus {
  CONNECTED = 'connected',
  RECONNECTING = 'reconnecting',
  DISCONNECTED = 'disconnected',
  /** The worker's watchdog found Redis not answering a claim loop and is reconnecting (transport only). */
  STALLED = 'stalled',
}

/** Events the transport and the client report through `on()`. */
export type RedisTaskEvents = {
  error: (error: Error) => void;
  status: (status: RedisTaskStatus) => void;
  /** Transport only: how each run of a task ended (completed, retried, dead-lettered, lease-lost). No payload. */
  task: (event: TaskOutcomeEvent) => void;
  /**
   * Transport only: what each tick of a recurring schedule this process fired came to (`fired` with its
   * task id, `skipped` while the previous task lives, `missed`, `held` while its pattern has no worker yet),
   * told by the one process that handled it.
   */
  schedule: (event: ScheduleTickEvent) => void;
  /** Transport only: each progress value a handler reported (`ctx.progress()`), once Redis took it. */
  progress: (event: TaskProgressEvent) => void;
};
