import { describe, expect, it } from '@jest/globals';
import { readScriptDefinitions, type TaskRedis } from '../../lib/core/redis/scripts.js';
import { ScriptGateway } from '../../lib/core/redis/gateway.js';
import { QueueKeys } from '../../lib/core/redis/keys.js';
import type { AckItem, PreparedTask } from '../../lib/core/model/prepared-task.js';
import { LUA_HELPERS, LUA_INCLUDES } from '../../lib/core/redis/scripts/sources.generated.js';

const scripts = readScriptDefinitions();

describe('Lua script contract headers', () => {
  it('finds the scripts', () => {
    expect(scripts.map((script) => script.name)).toEqual(
      expect.arrayContaining([
        'enqueueTasks',
        'claimTasks',
        'ackTasks',
        'deadLetterTask',
        'requeueTasks',
        'heartbeatWorker',
      ]),
    );
  });

  describe.each(scripts.map((script) => [script.fileName, script] as const))('%s', (fileName, script) => {
    const header = script.lua.split('\n').filter((line) => line.startsWith('--'));
    const body = script.lua
      .split('\n')
      .filter((line) => !line.startsWith('--'))
      .join('\n');

    it('opens with a header line naming the file', () => {
      expect(script.lua.split('\n')[0]).toBe(`-- ${fileName}`);
    });

    it('states purpose, ARGV, return values and side effects', () => {
      for (const section of ['Purpose:', 'ARGV', 'Returns:', 'Side effects:']) {
        expect(header.some((line) => line.includes(section))).toBe(true);
      }
    });

    it('documents exactly the KEYS its file name promises', () => {
      const documented = header
        .map((line) => /^-- KEYS\[(\d+)\]:/.exec(line)?.[1])
        .filter((index): index is string => index !== undefined)
        .map(Number);
      expect(documented).toEqual(Array.from({ length: script.fixedKeys }, (_, i) => i + 1));
      const variable = header.some((line) => line.startsWith(`-- KEYS[${script.fixedKeys + 1}..`));
      expect(variable).toBe(script.variableKeys);
    });

    it('uses no fixed KEYS index beyond what the header documents', () => {
      const used = [...body.matchAll(/KEYS\[(\d+)\]/g)].map((match) => Number(match[1]));
      for (const index of used) {
        expect(index).toBeLessThanOrEqual(script.fixedKeys);
      }
    });

    it('uses no helper before its `-- @helpers` line (where the helpers are defined), and includes them once', () => {
      const marker = script.lua.indexOf('\n-- @helpers\n');
      const helpers = Object.values(LUA_INCLUDES).flatMap((lua) =>
        [...lua.matchAll(/^local (?:function )?([A-Za-z_]+)/gm)].map((match) => match[1]),
      );
      expect(helpers).toContain('healingCall');
      const before =
        marker < 0
          ? ''
          : script.lua
              .slice(0, marker)
              .split('\n')
              .filter((line) => !line.startsWith('--'))
              .join('\n');
      expect(helpers.filter((name) => new RegExp(`\\b${name}\\b`).test(before))).toEqual([]);
      if (marker >= 0) expect(script.source.split('\nlocal function healingCall(').length).toBeLessThanOrEqual(2);
    });

    it('slices no key name (a base or root it needs is a declared key)', () => {
      expect(script.lua).not.toMatch(/string\.g?sub\(\s*KEYS\[|\bcoalesceBase\(/);
    });

    it('reaches per-task features only through the seam (include/follow.lua) when it moves a task', () => {
      if (!(LUA_HELPERS[fileName] ?? []).includes('follow')) return;
      const features = ['track', 'coalesce', 'batch', 'flow'].flatMap((name) =>
        [...LUA_INCLUDES[name].matchAll(/^local function ([A-Za-z_]+)/gm)].map((match) => match[1]),
      );
      expect(features).toContain('trackState');
      expect(features.filter((name) => new RegExp(`\\b${name}\\(`).test(body))).toEqual([]);
      expect(body.match(/\bfollowTask\(/g)?.length).toBe(1);
    });

    it('builds no key names inside Lua (every key comes from KEYS), unless its header documents why', () => {
      // A key built in Lua would concatenate a literal containing the ':' separator. The one script
      // allowed to (the consumer-group fan-out) says so on a "-- Builds keys:" header line. A call of
      // include/coalesce.lua's key namer (coalesceKey), include/batch.lua's batchEvent or the seam's
      // followTask (include/follow.lua) builds key names as well.
      const builds = /\.\.\s*'[^']*:[^']*'|'[^']*:[^']*'\s*\.\.|\bcoalesceKey\(|\bbatchEvent\(|\bfollowTask\(/.test(
        body,
      );
      const documented = header.some((line) => line.startsWith('-- Builds keys: '));
      expect({ builds, documented }).toEqual({ builds: documented, documented });
    });
  });
});

/**
 * Each script whose header states a stride ("per task, N fields") is called through the gateway with one
 * item and with two (of one client, so no KEYS are added): the arguments grow by exactly the stated
 * stride. The gateway is the only encoder of script arguments; this ties each encoder to its header.
 */
describe('argument strides: each encoder against its script header', () => {
  const stated = (name: string): number[] => {
    const script = scripts.find((each) => each.name === name);
    if (!script) throw new Error(`no script ${name}`);
    const header = script.lua
      .split('\n')
      .filter((line) => line.startsWith('--'))
      .map((line) => line.replace(/^--\s*/, ''))
      .join(' ');
    const found = /per (?:task|record), (?:either )?(\d+) fields[^;]*(?:; or (\d+) fields)?/.exec(header);
    if (!found) throw new Error(`${name}: no "per task, N fields" in its header`);
    return found
      .slice(1)
      .filter((value) => value !== undefined)
      .map(Number);
  };

  /** The arguments a gateway method sends to its script (a connection that records and answers nothing). */
  async function sent(call: (gateway: ScriptGateway) => Promise<unknown>): Promise<unknown[]> {
    let args: unknown[] = [];
    const redis = new Proxy(
      {},
      {
        get:
          (_, name) =>
          (...given: unknown[]) => {
            args = given;
            return Promise.resolve(
              name === 'heartbeatWorker'
                ? [0, [], []]
                : name === 'claimTasks'
                  ? [[], [], 0, 0]
                  : name === 'ackTasks'
                    ? []
                    : 0,
            );
          },
      },
    );
    await call(new ScriptGateway(redis as unknown as TaskRedis)).catch(() => undefined);
    return args;
  }

  const keys = new QueueKeys('strides', 'q');
  const task = (id: string, options: Partial<PreparedTask> = {}): PreparedTask => ({
    id,
    clientId: 'a',
    entry: `0|{"id":"${id}"}`,
    priority: 0,
    delayMs: 0,
    deduplicationTtlMs: 1_000,
    awaitsReply: false,
    ...options,
  });
  const growth = async (
    one: (gateway: ScriptGateway) => Promise<unknown>,
    two: (gateway: ScriptGateway) => Promise<unknown>,
  ) => (await sent(two)).length - (await sent(one)).length;
  const enqueue = (tasks: PreparedTask[]) => (gateway: ScriptGateway) =>
    gateway.enqueue(keys, { deadline: Date.now() + 1_000, timeoutMs: 1_000, batches: [{ tasks }] });

  it('enqueueTasks: a plain task, and a task with options', async () => {
    const plain = await growth(enqueue([task('1')]), enqueue([task('1'), task('2')]));
    const withOptions = await growth(
      enqueue([task('1', { priority: 3 })]),
      enqueue([task('1', { priority: 3 }), task('2', { deduplicationKey: 'k' })]),
    );
    expect([plain, withOptions]).toEqual(stated('enqueueTasks'));
  });

  it('ackTasks', async () => {
    const ack = (token: string): AckItem => ({ token, taskId: token, resultTtlMs: 1_000 });
    expect([
      await growth(
        (g) => g.acknowledge(keys, 'w', [ack('1')]),
        (g) => g.acknowledge(keys, 'w', [ack('1'), ack('2')]),
      ),
    ]).toEqual(stated('ackTasks'));
  });

  it('requeueTasks, promoteTasks and requeueDeadLetters', async () => {
    const held = (token: string) => ({ token, clientId: 'a', priority: 0 });
    expect([
      await growth(
        (g) => g.requeue(keys, 'w', false, [held('1')]),
        (g) => g.requeue(keys, 'w', false, [held('1'), held('2')]),
      ),
    ]).toEqual(stated('requeueTasks'));
    const due = (entry: string) => ({ entry, clientId: 'a', priority: 0 });
    expect([
      await growth(
        (g) => g.promote(keys, [due('1')]),
        (g) => g.promote(keys, [due('1'), due('2')]),
      ),
    ]).toEqual(stated('promoteTasks'));
    const letter = (raw: string) => ({ raw, clientId: 'a', entry: raw, priority: 0 });
    expect([
      await growth(
        (g) => g.requeueDeadLetters(keys, [letter('1')]),
        (g) => g.requeueDeadLetters(keys, [letter('1'), letter('2')]),
      ),
    ]).toEqual(stated('requeueDeadLetters'));
  });
});
