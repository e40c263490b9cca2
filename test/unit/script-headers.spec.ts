import { describe, expect, it } from '@jest/globals';
import { readScriptDefinitions } from '../../lib/core/redis/scripts.js';
import { LUA_INCLUDES } from '../../lib/core/redis/scripts/sources.generated.js';

const scripts = readScriptDefinitions();

describe('Lua script contract headers', () => {
  it('finds the scripts', () => {
    expect(scripts.map((script) => script.name)).toEqual(
      expect.arrayContaining(['enqueueTasks', 'claimTasks', 'ackTasks', 'deadLetterTask', 'requeueTasks', 'heartbeatWorker']),
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
      const helpers = Object.values(LUA_INCLUDES).flatMap((lua) => [...lua.matchAll(/^local (?:function )?([A-Za-z_]+)/gm)].map((match) => match[1]));
      expect(helpers).toContain('healingCall');
      const before = marker < 0 ? '' : script.lua.slice(0, marker).split('\n').filter((line) => !line.startsWith('--')).join('\n');
      expect(helpers.filter((name) => new RegExp(`\\b${name}\\b`).test(before))).toEqual([]);
      if (marker >= 0) expect(script.source.split('\nlocal function healingCall(').length).toBeLessThanOrEqual(2);
    });

    it('builds no key names inside Lua (every key comes from KEYS), unless its header documents why', () => {
      // A key built in Lua would concatenate a literal containing the ':' separator. The one script
      // allowed to (the consumer-group fan-out) says so on a "-- Builds keys:" header line.
      const builds = /\.\.\s*'[^']*:[^']*'|'[^']*:[^']*'\s*\.\./.test(body);
      const documented = header.some((line) => line.startsWith('-- Builds keys: '));
      expect({ builds, documented }).toEqual({ builds: documented, documented });
    });
  });
});
