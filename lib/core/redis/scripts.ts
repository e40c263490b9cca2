import { createHash } from 'node:crypto';
import { LUA_HELPERS, LUA_INCLUDES, LUA_SCRIPTS } from './scripts/sources.generated.js';
import { scriptCommand, type ScriptFunction } from './script-command.js';
import { shebangOf, WHEN_FULL } from './script-flags.js';
import type { RedisConnection, ScriptDefinition } from './script-types.js';

export type { RedisConnection, ScriptDefinition } from './script-types.js';

const FILE_NAME = /^([a-z][A-Za-z]+)-(\d+)(\+n)?\.lua$/;
const HELPERS_HERE = /^-- @helpers$/m;

/**
 * Helpers shared by several scripts (`scripts/include/<name>.lua`), those the header's `Includes:` line
 * names and what they need (each include's `Needs:` line), ordered by scripts/embed-lua.mjs: at the file's
 * `-- @helpers` line, else before the file. scripts/embed-lua.mjs composes docs/enqueue.lua alike.
 */
function withIncludes(fileName: string, lua: string): string {
  const helpers = (LUA_HELPERS[fileName] ?? []).map((name) => LUA_INCLUDES[name]);
  const at = HELPERS_HERE.exec(lua);
  if (!at) return [...helpers, lua].join('\n');
  return [lua.slice(0, at.index), ...helpers, lua.slice(at.index)].join('\n');
}

/**
 * Every `scripts/*.lua` file (embedded at build time by scripts/embed-lua.mjs); the name
 * `verbNoun-N.lua` states its command and KEYS count.
 */
export function readScriptDefinitions(): ScriptDefinition[] {
  return Object.keys(LUA_SCRIPTS)
    .sort()
    .map((fileName) => {
      const match = FILE_NAME.exec(fileName);
      if (!match) {
        throw new Error(`Lua script file name "${fileName}" is not of the form verbNoun-N.lua or verbNoun-N+n.lua`);
      }
      const lua = LUA_SCRIPTS[fileName];
      const source = withIncludes(fileName, lua);
      const whenFull = WHEN_FULL[match[1]];
      if (whenFull === undefined)
        throw new Error(`${fileName} does not say what it may do when Redis is full (script-flags.ts)`);
      const flagged = shebangOf(whenFull) + source;
      return {
        name: match[1],
        fileName,
        fixedKeys: Number(match[2]),
        variableKeys: match[3] !== undefined,
        lua,
        source,
        sha: createHash('sha1').update(source).digest('hex'),
        flagged: { source: flagged, sha: createHash('sha1').update(flagged).digest('hex') },
      };
    });
}

let cached: ScriptDefinition[] | undefined;

/** The scripts, read once per process. */
export function scriptDefinitions(): ScriptDefinition[] {
  cached ??= readScriptDefinitions();
  return cached;
}

/** A flow's five keys, in the order its scripts take them (see FlowKeys). */
export type FlowKeyNames = [record: string, nodes: string, edges: string, specs: string, results: string];

/**
 * The keys every settle script ends with: those releasing a per-client cap slot, the outcome counters, and
 * the base and root what follows a task names its keys from (include/follow.lua).
 */
export type SettleKeys = [
  counted: string,
  inflight: string,
  parked: string,
  ring: string,
  counters: string,
  base: string,
  root: string,
];

/** The commands the scripts add to a connection (see each `.lua` header for the contract). */
export interface TaskCommands {
  enqueueTasks(root: string, ...tasks: (string | number)[]): Promise<(0 | string)[] | -1>;
  claimTasks(
    base: string,
    wanted: number,
    workerId: string,
    clientConcurrency: number,
    tokenPrefix: string,
    leaseMs: number,
    ...acks: string[]
  ): Promise<
    [
      lost: string[],
      claimed: string[] | -1 | -2,
      throttledUntil: number,
      drained: 0 | 1,
      started?: number[],
      keeps?: string[],
    ]
  >;
  ackTasks(processing: string, ...keysAndTasks: [...SettleKeys, ...(string | number)[]]): Promise<(0 | 1)[]>;
  deadLetterTask(
    processing: string,
    deadLetters: string,
    result: string,
    dedup: string,
    ...keysAndArgs: [
      ...SettleKeys,
      token: string,
      record: string,
      cap: number,
      dedupHolder: string,
      index: string,
      entryKey: string,
      ...reply: (string | number)[],
    ]
  ): Promise<0 | 1>;
  requeueTasks(numKeys: number, ...keysAndArgs: (string | number)[]): Promise<number>;
  heartbeatWorker(
    workers: string,
    processing: string,
    heartbeats: string,
    faults: string,
    workerId: string,
    leaseMs: number | `${number}/${number}`,
    ...runningTokens: string[]
  ): Promise<[now: number, lost: string[], orphaned: string[]]>;
  retryTask(
    processing: string,
    delayed: string,
    ...keysAndArgs: [
      ...SettleKeys,
      token: string,
      delayMs: number,
      index: string,
      entry: string,
      counts: 'attempt' | 'step' | 'yield',
    ]
  ): Promise<number>;
  startTasks(base: string, root: string, workerId: string, ...tasks: (string | number)[]): Promise<(0 | 1 | 2)[]>;
  startCoalesced(base: string, workerId: string, ...tasks: string[]): Promise<(0 | 1 | 2 | string)[]>;
  openBatch(
    record: string,
    children: string,
    complete: string,
    success: string,
    keepMs: number,
  ): Promise<[state: string, ttlMs?: number]>;
  addBatchChildren(
    record: string,
    children: string,
    patterns: string,
    change: '+' | '-',
    pattern: string,
    ...ids: string[]
  ): Promise<string>;
  sealBatch(record: string, children: string): Promise<(number | string)[]>;
  foldBatch(
    record: string,
    children: string,
    patterns: string,
    batchId: string,
    ...events: string[]
  ): Promise<(number | string)[]>;
  closeBatch(record: string, children: string, patterns: string, callbacks: string): Promise<(number | string)[]>;
  trimBatchEvents(events: string, count: number, first: string, last: string): Promise<0 | 1>;
  cancelBatch(record: string, children: string, patterns: string): Promise<string[]>;
  openFlow(
    ...keysAndArgs: [...FlowKeyNames, keepMs: number, complete: string, dueAt: number | '', ...nodes: string[]]
  ): Promise<(number | string)[]>;
  foldFlow(...keysAndArgs: [...FlowKeyNames, ...events: string[]]): Promise<(number | string)[]>;
  markFlow(
    ...keysAndArgs: [...FlowKeyNames, what: 'released' | 'gone' | 'callback' | 'counted', ...ids: string[]]
  ): Promise<number>;
  countFlow(counters: string, marker: string, counter: string, markerMs: number): Promise<0 | 1>;
  cancelFlow(...keysAndArgs: [...FlowKeyNames, reason: string]): Promise<string>;
  dropHeld(processing: string, ...keysAndArgs: [...SettleKeys, token: string, batch: string]): Promise<0 | 1>;
  revokeTask(
    base: string,
    root: string,
    id: string,
    reason: string,
    callId: string,
  ): Promise<['cancelled' | 'requested' | 'ended' | 'unknown', string]>;
  saveStep(
    base: string,
    workerId: string,
    token: string,
    id: string,
    what: 'result' | 'checkpoint' | 'failure',
    name: string,
    value: string,
    keepMs: number,
  ): Promise<number>;
  reportProgress(
    base: string,
    workerId: string,
    token: string,
    id: string,
    seq: number,
    value: string,
    channel: string,
    message: string,
  ): Promise<0 | 1>;
  promoteTasks(numKeys: number, ...keysAndArgs: (string | number)[]): Promise<number>;
  deadLetterDelayed(
    delayed: string,
    deadLetters: string,
    counters: string,
    base: string,
    root: string,
    entry: string,
    record: string,
    cap: number,
  ): Promise<0 | 1>;
  forgetWorker(
    workers: string,
    processing: string,
    heartbeats: string,
    workerId: string,
    expiredBy: number,
  ): Promise<0 | 1>;
  releaseLock(lock: string, owner: string): Promise<0 | 1>;
  requeueDeadLetters(numKeys: number, ...keysAndArgs: (string | number)[]): Promise<number>;
  releaseThrottled(throttled: string, ring: string, now: number): Promise<[released: number, nextDue: number]>;
  snapshotCounters(counters: string, history: string): Promise<0 | 1>;
  readOverview(root: string, sample: number): Promise<unknown[]>;
  countUnreachable(base: string, limit: number): Promise<[gap: number, wanted: string | null]>;
  takeSweepTurn(turn: string, owner: string, turnMs: number): Promise<number>;
  changeSchedule(
    records: string,
    due: string,
    state: string,
    firing: string,
    op: 'upsert' | 'pause' | 'resume' | 'orphan' | 'remove',
    id: string,
    ...args: (string | number)[]
  ): Promise<string | number>;
  claimSchedules(
    records: string,
    due: string,
    state: string,
    firing: string,
    checked: string,
    limit: number,
    leaseMs: number,
    keepCheckedMs: number,
    graceMs: number,
  ): Promise<(string | number | null)[]>;
  advanceSchedule(
    records: string,
    due: string,
    stateKey: string,
    firing: string,
    id: string,
    version: string,
    take: string,
    next: number,
    newState: string,
    again: number,
  ): Promise<0 | 1>;
  recordShardCount(shardCount: string, ring: string, delayed: string, workers: string, count: number): Promise<number>;
  rejoinClient(
    ring: string,
    parked: string,
    throttled: string,
    pending: string,
    priority: string,
    pendingCount: string,
    faults: string,
    clientId: string,
  ): Promise<number>;
  cancelTask(
    pending: string,
    priority: string,
    delayed: string,
    dedup: string,
    prioritized: string,
    pendingCount: string,
    base: string,
    root: string,
    entry: string,
    taskPriority: number,
    dedupHolder: string,
    ...tracked: string[]
  ): Promise<0 | 1>;
}

export type TaskRedis = RedisConnection & TaskCommands;

const DEFINED = Symbol('nestjs-redis-tasks.scriptsDefined');

/**
 * Defines every script on a connection: each call one EVALSHA, an EVAL when Redis answers NOSCRIPT
 * (see scriptCommand).
 * Idempotent, so a connection given by the user can be shared by a client and a transport.
 */
export function defineScripts(connection: RedisConnection): TaskRedis {
  const marked = connection as RedisConnection & { [DEFINED]?: true };
  if (!marked[DEFINED]) {
    const options = connection.options as { keyPrefix?: string; redisOptions?: { keyPrefix?: string } };
    const direct = !options.keyPrefix && !options.redisOptions?.keyPrefix;
    for (const script of scriptDefinitions()) {
      // Also defined for pipelines (and connections whose keyPrefix ioredis adds to every key).
      connection.defineCommand(script.name, {
        lua: script.source,
        ...(script.variableKeys ? {} : { numberOfKeys: script.fixedKeys }),
      });
      if (direct) {
        const commands = connection as unknown as Record<string, ScriptFunction>;
        commands[script.name] = scriptCommand(connection, script, commands[script.name]);
      }
    }
    marked[DEFINED] = true;
  }
  return connection as TaskRedis;
}
