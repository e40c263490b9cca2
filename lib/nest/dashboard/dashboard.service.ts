import {
  BadRequestException,
  ForbiddenException,
  Inject,
  Injectable,
  NotFoundException,
  Optional,
  ServiceUnavailableException,
  type OnModuleDestroy,
} from '@nestjs/common';
import { TaskAdmin } from '../../core/admin/admin.js';
import {
  OverviewReader,
  type ClientPage,
  type Overview,
  type PatternOverview,
  type RunningTask,
} from '../../core/admin/overview.js';
import type { WorkerInfo } from '../../core/admin/stats.js';
import type { DeadLetterRecord } from '../../core/model/dead-letter.js';
import { DEFAULT_GROUP } from '../../core/config/options.js';
import { ScheduleNotFoundError } from '../../core/model/errors.js';
import type { CancelResult, TaskStatus } from '../../core/model/task-status.js';
import type { BatchCancelResult, BatchStatus } from '../../core/model/batch.js';
import type { FlowCancelResult, FlowStatus } from '../../core/model/flow.js';
import { errorMessage } from '../../core/support/logger.js';
import { connectedRedis, readyBy } from '../ready-by.js';
import { scrubbing } from '../../core/support/redact.js';
import { RedisTaskClient } from '../redis-task.client.js';
import { CsrfTokens, type DashboardRequest } from './csrf.js';
import {
  outboxStatsWithin,
  REDIS_TASK_OUTBOX_STATS,
  type OutboxStatsSource,
  type RedisTaskOutboxStats,
} from '../outbox-stats.js';
import type { ResolvedDashboardSettings } from './dashboard.options.js';
import { countOf, filterOf, groupOf, selectionOf } from './dashboard.requests.js';

export const DASHBOARD_SETTINGS = Symbol('RedisTaskDashboardSettings');

/** Most rows of a page. */
const MAX_PAGE = 200;

/** A pattern's page: its figures per group, its clients (a page), its consumer groups and workers. */
export interface PatternPage {
  readonly pattern: string;
  readonly group: string;
  readonly groups: readonly string[];
  /** The pattern's headline counts (as on the overview), or null when the group holds nothing yet. */
  readonly summary: PatternOverview | null;
  readonly clients: ClientPage;
  readonly workers: readonly (WorkerInfo & {
    readonly heartbeatAgeMs: number | null;
    readonly running: readonly RunningTask[];
  })[];
}

/**
 * What the dashboard's routes do, over the core's admin API and overview reader: reads are bounded by
 * what the page shows; every input is checked here before it reaches Redis; actions are refused unless
 * enabled. Its own connection (a `RedisTaskClient` of the same connection options).
 */
@Injectable()
export class DashboardService implements OnModuleDestroy {
  readonly csrf: CsrfTokens;
  private readonly client: RedisTaskClient;
  private parts?: Promise<{ admin: TaskAdmin; reader: OverviewReader }>;

  constructor(
    @Inject(DASHBOARD_SETTINGS) readonly settings: ResolvedDashboardSettings,
    /** The app's transactional outbox (RedisTaskOutboxModule), when it has one: shown on the overview. */
    @Optional() @Inject(REDIS_TASK_OUTBOX_STATS) private readonly outbox?: OutboxStatsSource,
  ) {
    this.csrf = new CsrfTokens(settings.csrfSecret, {
      allowedHosts: settings.allowedHosts,
      trustProxy: settings.trustProxy,
    });
    // spread-ok: once per dashboard
    this.client = new RedisTaskClient({
      ...(settings.connection !== undefined ? { connection: settings.connection } : {}),
      ...(settings.prefix !== undefined ? { prefix: settings.prefix } : {}),
      evictionPolicy: 'off',
      tracing: false,
    });
  }

  async onModuleDestroy(): Promise<void> {
    await this.client.close();
  }

  async overview(): Promise<Overview & { outbox?: RedisTaskOutboxStats | { readonly error: string } }> {
    const [overview, outbox] = await Promise.all([
      (await this.core()).reader.overview(),
      this.outbox ? outboxStatsWithin(this.outbox, 1_000) : undefined,
    ]);
    // spread-ok: once per overview read (a page refresh)
    return outbox ? { ...overview, outbox } : overview;
  }

  async pattern(query: Record<string, unknown>): Promise<PatternPage> {
    const pattern = await this.knownPattern(query.name);
    const group = groupOf(query.group);
    const { admin, reader } = await this.core();
    const scoped = group === DEFAULT_GROUP ? admin : admin.forGroup(group);
    const [groups, summary, clients, workers] = await Promise.all([
      admin.groups(pattern),
      reader.summary(pattern, group),
      reader.clients(pattern, group, {
        offset: countOf('offset', query.offset, 0, Number.MAX_SAFE_INTEGER),
        limit: countOf('limit', query.limit, 50, MAX_PAGE),
      }),
      scoped.workers(pattern),
    ]);
    const now = Date.now();
    const withRunning = await Promise.all(
      workers.map(async (worker) => ({
        // spread-ok: per dashboard request
        ...worker,
        heartbeatAgeMs: worker.lastHeartbeatAt === null ? null : Math.max(0, now - worker.lastHeartbeatAt),
        running: await reader.running(pattern, group, worker.workerId, 20),
      })),
    );
    return { pattern, group, groups, summary: summary ?? null, clients, workers: withRunning };
  }

  async deadLetters(
    query: Record<string, unknown>,
  ): Promise<{ records: readonly DeadLetterRecord[]; total: number; nextOffset: number | null }> {
    const pattern = await this.knownPattern(query.name);
    const admin = await this.admin(query.group);
    const page = await admin.findDeadLetters(pattern, {
      offset: countOf('offset', query.offset, 0, Number.MAX_SAFE_INTEGER),
      limit: countOf('limit', query.limit, 25, MAX_PAGE),
      filter: filterOf(query),
    });
    // Payloads only when shown (an opt-in that needs a guard), and then a preview of a large one: a page
    // of 1 MB payloads is not sent to the browser every refresh.
    return {
      // spread-ok: per dashboard request
      ...page,
      records: page.records.map(({ payload, ...record }) =>
        // spread-ok: per record of a dashboard page
        this.settings.showPayloads ? { ...record, payload: preview(payload) } : record,
      ),
    };
  }

  /** Refuses a request from another origin or host (reads included: see CsrfTokens). */
  admit(headers: Readonly<Record<string, string | string[] | undefined>>, kind: DashboardRequest): void {
    const refusal = this.csrf.refusal(headers, kind);
    if (refusal) throw new ForbiddenException(refusal);
  }

  /** Checks that actions are on and the request passes the CSRF checks. */
  authorize(headers: Readonly<Record<string, string | string[] | undefined>>): void {
    if (!this.settings.actions)
      throw new ForbiddenException('actions are disabled on this dashboard (option "actions")');
    this.admit(headers, 'action');
  }

  async pause(body: Record<string, unknown>, paused: boolean): Promise<{ paused: boolean }> {
    const pattern = await this.knownPattern(body.name);
    const admin = await this.admin(body.group);
    await (paused ? admin.pause(pattern) : admin.resume(pattern));
    return { paused };
  }

  /** Every recurring schedule (spec, state, next ticks), payloads only when shown. */
  async schedules(): Promise<{ schedules: unknown[] }> {
    const listed = await (await this.core()).admin.listSchedules();
    return {
      schedules: listed.map(({ spec, ...schedule }) => {
        const { payload, ...shown } = spec;
        // spread-ok: per schedule of a dashboard request
        return { ...schedule, spec: this.settings.showPayloads ? { ...shown, payload: preview(payload) } : shown };
      }),
    };
  }

  /** pause, resume, trigger or remove one schedule (behind the dashboard's guard and its CSRF check). */
  async scheduleAction(body: Record<string, unknown>): Promise<unknown> {
    const { id, action } = body;
    if (typeof id !== 'string' || id.length === 0) throw new BadRequestException('"id" must name a schedule');
    return applyScheduleAction((await this.core()).admin, id, action);
  }

  /** A tracked task by id, as `taskView` shows it. */
  async task(query: Record<string, unknown>): Promise<TaskView> {
    const pattern = await this.knownPattern(query.name);
    return taskView(
      await (await this.admin(query.group)).getTask(pattern, taskIdOf(query.id)),
      this.settings.showPayloads,
    );
  }

  /** Cancels a tracked task wherever it is (behind the dashboard's guard and its CSRF check). */
  async cancelTask(body: Record<string, unknown>): Promise<CancelResult> {
    const pattern = await this.knownPattern(body.name);
    const reason = body.reason ?? '';
    if (typeof reason !== 'string' || reason.length > 1_000) {
      throw new BadRequestException('"reason" must be a string of at most 1,000 characters');
    }
    return (await this.admin(body.group)).cancelTask(pattern, taskIdOf(body.id), reason);
  }

  /** A batch by id. */
  async batch(query: Record<string, unknown>): Promise<BatchStatus> {
    return (await this.core()).admin.getBatch(batchIdOf(query.id));
  }

  /** Cancels a batch (behind the dashboard's guard and its CSRF check). */
  async cancelBatch(body: Record<string, unknown>): Promise<BatchCancelResult> {
    return (await this.core()).admin.cancelBatch(batchIdOf(body.id));
  }

  /** A flow by id; its nodes' results (payload) only where payloads are shown, as previews. */
  async flow(query: Record<string, unknown>): Promise<FlowStatus & { resultsHidden?: true }> {
    const status = await (await this.core()).admin.getFlow(flowIdOf(query.id));
    const hidden = !this.settings.showPayloads;
    const nodes = status.nodes.map(({ result, ...node }) =>
      // spread-ok: per dashboard request
      result === undefined || hidden ? node : { ...node, result: preview(result) },
    );
    // spread-ok: per dashboard request
    return hidden ? { ...status, nodes, resultsHidden: true } : { ...status, nodes };
  }

  /** Cancels a flow (behind the dashboard's guard and its CSRF check). */
  async cancelFlow(body: Record<string, unknown>): Promise<FlowCancelResult> {
    return (await this.core()).admin.cancelFlow(flowIdOf(body.id), 'from the dashboard');
  }

  async requeue(body: Record<string, unknown>): Promise<{ requeued: number; skipped: number }> {
    const pattern = await this.knownPattern(body.name);
    return (await this.admin(body.group)).requeueDeadLetters(pattern, selectionOf(body));
  }

  async purge(body: Record<string, unknown>): Promise<{ purged: number }> {
    const pattern = await this.knownPattern(body.name);
    return { purged: await (await this.admin(body.group)).purgeDeadLetters(pattern, selectionOf(body)) };
  }

  /**
   * The admin parts, once Redis answers: while it is unreachable a request fails within
   * `enqueueTimeoutMs` with 503 (the page says so and tries again), instead of waiting on ioredis's retries.
   */
  private async core(): Promise<{ admin: TaskAdmin; reader: OverviewReader }> {
    const parts = await this.connected();
    await readyBy(this.client, Date.now() + this.client.options.enqueueTimeoutMs, 'the dashboard').catch(
      (error: unknown) => {
        throw new ServiceUnavailableException(
          `${errorMessage(error).replace(/^nestjs-redis-tasks: /, '')}; the page tries again at its next refresh`,
        );
      },
    );
    return parts;
  }

  private connected(): Promise<{ admin: TaskAdmin; reader: OverviewReader }> {
    this.parts ??= connectedRedis(this.client).then((redis) => {
      // Errors reach the app's logger without the Redis command arguments ioredis attaches to them.
      return {
        admin: scrubbing(TaskAdmin.forPrefix(redis, this.client.options.prefix)),
        reader: scrubbing(OverviewReader.forPrefix(redis, this.client.options.prefix)),
      };
    });
    this.parts.catch(() => (this.parts = undefined));
    return this.parts;
  }

  private async admin(group: unknown): Promise<TaskAdmin> {
    const { admin } = await this.core();
    const name = groupOf(group);
    return name === DEFAULT_GROUP ? admin : admin.forGroup(name);
  }

  /** A pattern in use under the prefix (anything else is refused before it reaches Redis keys). */
  private async knownPattern(name: unknown): Promise<string> {
    if (typeof name !== 'string' || name.length === 0 || name.length > 1_024)
      throw new BadRequestException('"name" must be a pattern name');
    const { admin } = await this.core();
    if (!(await admin.queues()).includes(name)) throw new NotFoundException('no such pattern under this prefix');
    return name;
  }
}

/** Largest payload the dashboard sends as it is (characters of JSON); a larger one is cut to a preview. */
const PAYLOAD_PREVIEW = 4_096;

function preview(payload: unknown): unknown {
  const json = JSON.stringify(payload) ?? '';
  return json.length <= PAYLOAD_PREVIEW
    ? payload
    : `${json.slice(0, PAYLOAD_PREVIEW)}… (${json.length - PAYLOAD_PREVIEW} more characters; see the CLI: dead show)`;
}

/** A task id from a request, or 400. */
function taskIdOf(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 512) {
    throw new BadRequestException('"id" must name a task (1 to 512 characters)');
  }
  return value;
}

/** One schedule action: 400 for an unknown action, 404 for an unknown schedule. */
async function applyScheduleAction(admin: TaskAdmin, id: string, action: unknown): Promise<unknown> {
  try {
    switch (action) {
      case 'pause':
        await admin.pauseSchedule(id);
        return { id, paused: true };
      case 'resume':
        await admin.resumeSchedule(id);
        return { id, paused: false };
      case 'trigger':
        return await admin.triggerSchedule(id);
      case 'remove':
        if (!(await admin.removeSchedule(id))) throw new ScheduleNotFoundError(id);
        return { id, removed: true };
      default:
        throw new BadRequestException('"action" must be pause, resume, trigger or remove');
    }
  } catch (error) {
    if (error instanceof ScheduleNotFoundError) throw new NotFoundException(`no schedule "${id}"`);
    throw error;
  }
}

/** The batch id a request names (a 400 when it names none). */
function batchIdOf(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > 200) {
    throw new BadRequestException('"id" must name a batch (1 to 200 characters)');
  }
  return id;
}

/** The flow id a request names (a 400 when it names none). */
function flowIdOf(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > 100) {
    throw new BadRequestException('"id" must name a flow (1 to 100 characters)');
  }
  return id;
}

/**
 * A tracked task as the dashboard shows it (`progressHidden`: a progress value is there, not shown; likewise a
 * durable steps' checkpoint, `steps.checkpointHidden`).
 */
export type TaskView = Omit<TaskStatus, 'steps'> & {
  progressHidden?: true;
  steps?: { readonly done: number; readonly checkpoint?: unknown; readonly checkpointHidden?: true };
};

/**
 * A task's `send()` result and its progress values are payload (a handler reports what it likes): shown only
 * where payloads are (`showPayloads`, behind the guard), as previews; otherwise the page says a progress value
 * is there, not what it is.
 */
function taskView({ result, progress, steps, ...status }: TaskStatus, showPayloads: boolean): TaskView {
  // A checkpoint is the handler's own value, like progress: shown only with payloads.
  const shownSteps =
    steps === undefined
      ? undefined
      : showPayloads
        ? { done: steps.done, checkpoint: preview(steps.checkpoint) }
        : // spread-ok: per dashboard request
          { done: steps.done, ...(steps.checkpoint === undefined ? {} : { checkpointHidden: true as const }) };
  // spread-ok: per dashboard request
  const withSteps = shownSteps === undefined ? status : { ...status, steps: shownSteps };
  // spread-ok: per dashboard request
  if (!showPayloads) return progress === undefined ? withSteps : { ...withSteps, progressHidden: true };
  // spread-ok: per dashboard request
  return {
    ...withSteps,
    ...(progress === undefined ? {} : { progress: preview(progress) }),
    ...(result === undefined ? {} : { result: preview(result) }),
  };
}
