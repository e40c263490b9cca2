import { afterAll, describe, expect, it } from '@jest/globals';
import { ACL_COMMANDS, scriptCommands } from '../../lib/core/redis/acl.js';
import { LUA_INCLUDES, LUA_SCRIPTS } from '../../lib/core/redis/scripts/sources.generated.js';
import { openRedis } from '../support/redis.js';

const redis = openRedis();

afterAll(async () => {
  await redis.quit();
});

/**
 * `aclRule` grants the scripts' commands by reading them from the scripts themselves (every upper-case
 * string literal that is not one of a few argument words): a command added to a script is in the rule
 * without anyone listing it. These tests keep that reading honest against a real Redis.
 */
describe("the ACL rule's commands, derived from the scripts", () => {
  it('reads only real Redis commands from the scripts (an argument word that is not a command fails here)', async () => {
    const derived = scriptCommands();
    expect(derived.length).toBeGreaterThan(30);
    const infos = (await redis.call('COMMAND', 'INFO', ...derived)) as unknown[];
    const unknown = derived.filter((_, i) => infos[i] === null);
    expect(unknown).toEqual([]);
  });

  it('grants every command a script calls by name, through redis.call, redis.pcall or a helper', () => {
    const called = new Set<string>();
    for (const lua of [...Object.values(LUA_SCRIPTS), ...Object.values(LUA_INCLUDES)]) {
      for (const [, command] of lua.matchAll(
        /(?:redis\.p?call|[A-Za-z]+Call|read|count)\(\s*(?:[^,()]+,\s*)*?'([A-Z]+)'/g,
      )) {
        called.add(command.toLowerCase());
      }
    }
    expect(called.size).toBeGreaterThan(30);
    expect([...called].filter((command) => !ACL_COMMANDS.includes(command))).toEqual([]);
  });

  it('names commands Redis knows, subcommands as `command|subcommand`', async () => {
    const top = [...new Set(ACL_COMMANDS.map((command) => command.split('|')[0]))];
    const infos = (await redis.call('COMMAND', 'INFO', ...top)) as unknown[];
    expect(top.filter((_, i) => infos[i] === null)).toEqual([]);
  });
});
