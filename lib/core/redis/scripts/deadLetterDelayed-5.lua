-- deadLetterDelayed-5.lua
-- Purpose: move an entry of the delayed set that cannot be run (not a task, or another format version)
--   to the queue's dead letters, once: only an entry still in the delayed set moves, so concurrent
--   reapers never record it twice, and a crash between steps can neither lose it nor copy it.
--   The record is written before the entry leaves the delayed set, and the list is type-checked first.
-- Includes: follow
-- Builds keys: what follows the entry (include/follow.lua), should it carry a feature's head, names its keys
--   from the base in KEYS[4] and the root in KEYS[5]; all share the hash tag, hence the slot.
-- KEYS[1]: delayed (sorted set: encoded entry -> due time)
-- KEYS[2]: dead letters (list of JSON records, newest first)
-- KEYS[3]: counters (hash: outcome -> count)
-- KEYS[4]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group other than
--   `default`); not a key itself
-- KEYS[5]: the shard's key root, `prefix:{pattern...}`; not a key itself
-- ARGV[1]: the entry as found; ARGV[2]: dead-letter record (JSON); ARGV[3]: dead-letter cap (count)
-- Returns: 1 when moved; 0 when the entry was no longer in the delayed set (someone else moved it)
-- Side effects: LPUSH + LTRIM on the dead letters, ZREM from the delayed set, HINCRBY counters deadLettered;
--   what follows it (include/follow.lua, move `dead`), for an entry whose head a feature reads.
if not checkedCall('zset', 'ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
expectTypes(KEYS[2], 'list')
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, math.max(1, tonumber(ARGV[3]) or 1) - 1)
redis.call('ZREM', KEYS[1], ARGV[1])
countOutcome(KEYS[3], 'deadLettered', 1)
followTask(followOf(KEYS[4], KEYS[5], ARGV[1]), 'dead', '', '', '', nil)
return 1
