import { BaseRpcContext } from '@nestjs/microservices';

/** What a handler can learn about the task it runs. */
export interface RedisTaskInfo {
  readonly id: string;
  readonly pattern: string;
  readonly clientId: string;
  /** 1-based number of this run. */
  readonly attempt: number;
  /** Runs allowed in all; after a failure of the last one the task goes to dead letters. */
  readonly maxAttempts: number;
  readonly enqueuedAt: Date;
  readonly workerId: string;
  /** The consumer group running this copy of the task (`default` unless the transport names one). */
  readonly group: string;
  /** Fires when the worker gives up on this run (shutdown timeout, lost lease). */
  readonly signal: AbortSignal;
}

/** `@Ctx()` of a `RedisTaskTransport` handler. */
export class RedisTaskContext extends BaseRpcContext<[RedisTaskInfo]> {
  getTask(): RedisTaskInfo {
    return this.args[0];
  }

  getTaskId(): string {
    return this.args[0].id;
  }

  getPattern(): string {
    return this.args[0].pattern;
  }

  getClientId(): string {
    return this.args[0].clientId;
  }

  getAttempt(): number {
    return this.args[0].attempt;
  }

  getMaxAttempts(): number {
    return this.args[0].maxAttempts;
  }

  getEnqueuedAt(): Date {
    return this.args[0].enqueuedAt;
  }

  getWorkerId(): string {
    return this.args[0].workerId;
  }

  getGroup(): string {
    return this.args[0].group;
  }

  getSignal(): AbortSignal {
    return this.args[0].signal;
  }
}
