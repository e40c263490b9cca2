import type { TaskOutcomeEvent } from '../core/model/outcomes.js';

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
};
