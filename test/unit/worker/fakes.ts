import { WakeSignals } from '../../../lib/core/worker/wake-signals.js';
import { resolveTransportOptions } from '../../../lib/core/config/options.js';
import { patternSettings } from '../../../lib/core/config/pattern-settings.js';
import { encodeEntry, type TaskEnvelope } from '../../../lib/core/model/codec.js';
import type { AckItem } from '../../../lib/core/model/prepared-task.js';
import type { ClaimedTaskCalls, DeadLetterWrite, Heartbeat } from '../../../lib/core/redis/gateway.js';
import { QueueKeys } from '../../../lib/core/redis/keys.js';
import type { TaskLogger } from '../../../lib/core/support/logger.js';
import type { AckBatch } from '../../../lib/core/worker/turn-batch.js';
import { ClaimedTask } from '../../../lib/core/worker/claimed-task.js';
import { Completer } from '../../../lib/core/worker/completer.js';
import { RunningTasks } from '../../../lib/core/worker/running.js';
import type { TaskExecution, TaskOutcome, WorkerOptions } from '../../../lib/core/worker/worker-types.js';

/** Fakes for one worker part at a time: no Redis, no Nest. Each records what it was asked. */

export const keys = new QueueKeys('unit', 'mail.send');

/** A gateway answering settle calls as scripted (held by default), recording each call. */
export class FakeGateway implements ClaimedTaskCalls {
  readonly calls: { script: string; token: string; detail?: unknown }[] = [];
  /** What the next settles answer: held (true), lost (false), or a Redis failure (an Error). */
  answers: (boolean | Error)[] = [];

  private next(): boolean {
    const answer = this.answers.shift() ?? true;
    if (answer instanceof Error) throw answer;
    return answer;
  }

  retry(
    _keys: QueueKeys,
    _workerId: string,
    token: string,
    delayMs: number,
  ): Promise<{ kind: 'scheduled'; dueAt: number } | { kind: 'lost' }> {
    this.calls.push({ script: 'retryTask', token, detail: delayMs });
    try {
      return Promise.resolve(this.next() ? { kind: 'scheduled', dueAt: 1_000 + delayMs } : { kind: 'lost' });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  deadLetter(_keys: QueueKeys, _workerId: string, token: string, letter: DeadLetterWrite): Promise<boolean> {
    this.calls.push({ script: 'deadLetterTask', token, detail: JSON.parse(letter.record) as unknown });
    try {
      return Promise.resolve(this.next());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  heartbeat(
    _keys: QueueKeys,
    _workerId: string,
    _leaseMs: number,
    running: readonly string[] = [],
  ): Promise<Heartbeat> {
    this.calls.push({ script: 'heartbeatWorker', token: running.join(',') });
    return Promise.resolve({ now: Date.now(), lost: this.next() ? [] : [...running], orphaned: [] });
  }

  /** The steps of tracked and coalesced tasks: not scripted here (their units test them against Redis). */
  readonly track = {
    start: () => Promise.reject(new Error('FakeGateway: track.start is not scripted')),
    startCoalesced: () => Promise.reject(new Error('FakeGateway: track.startCoalesced is not scripted')),
    progress: () => Promise.reject(new Error('FakeGateway: track.progress is not scripted')),
  };

  /** Durable steps: not scripted here (test/e2e/steps.spec.ts and the saveStep script's test run them on Redis). */
  readonly steps = {
    load: () => Promise.reject(new Error('FakeGateway: steps.load is not scripted')),
    save: () => Promise.reject(new Error('FakeGateway: steps.save is not scripted')),
  };
}

/** This turn's acknowledgement call, scripted: each acknowledgement answers held unless told otherwise. */
export class FakeAckBatch implements Pick<AckBatch, 'add'> {
  readonly acks: AckItem[] = [];
  answers: (boolean | Error)[] = [];

  add(_keys: QueueKeys, _workerId: string, ack: AckItem): Promise<boolean> {
    this.acks.push(ack);
    const answer = this.answers.shift() ?? true;
    return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer);
  }
}

export class CapturingLogger implements TaskLogger {
  readonly lines: string[] = [];
  log(message: string): void {
    this.lines.push(`log: ${message}`);
  }
  warn(message: string): void {
    this.lines.push(`warn: ${message}`);
  }
  error(message: string): void {
    this.lines.push(`error: ${message}`);
  }
}

/** Worker options as a transport resolves them, `changes` on top. */
export function workerOptions(changes: Partial<WorkerOptions> = {}): WorkerOptions {
  const resolved = resolveTransportOptions({
    workerId: 'unit-worker',
    maxAttempts: 3,
    backoff: { type: 'fixed', delayMs: 100 },
  });
  // spread-ok: a test fixture
  return {
    ...resolved,
    tracing: undefined,
    patterns: patternSettings(new Map(), resolved),
    wakeSignals: new WakeSignals(),
    ...changes,
  };
}

export function envelope(changes: Partial<TaskEnvelope> = {}): TaskEnvelope {
  return { id: 'task-1', clientId: 'acme', payload: { to: 'ann@example.com' }, enqueuedAt: Date.now(), ...changes };
}

let tokens = 0;

/** A claimed task of `keys` holding `raw` (an encoded entry by default), under a fresh token. */
export function claimed(gateway: FakeGateway, raw: string | TaskEnvelope = envelope(), attempts = 0): ClaimedTask {
  const entry = typeof raw === 'string' ? raw : encodeEntry(raw, attempts);
  return new ClaimedTask(gateway, keys, `tok-${++tokens}`, entry, {
    workerId: 'unit-worker',
    deadLetterCap: 100,
    resultTtlMs: 60_000,
  });
}

/** A worker's parts around one runner: a completer over a fake batch, and the runs under way. */
export function parts() {
  const gateway = new FakeGateway();
  const batch = new FakeAckBatch();
  const completer = new Completer(batch, { workerId: 'unit-worker', resultTtlMs: 60_000 });
  const running = new RunningTasks();
  const logger = new CapturingLogger();
  return { gateway, batch, completer, running, logger };
}

/** An executor that answers each run as `answer` says, recording what it was handed. */
export function executor(answer: (execution: TaskExecution) => TaskOutcome | Promise<TaskOutcome>) {
  const seen: TaskExecution[] = [];
  const run = async (execution: TaskExecution): Promise<TaskOutcome> => {
    seen.push(execution);
    return answer(execution);
  };
  return { seen, run };
}
