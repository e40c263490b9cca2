-- reportProgress-1.lua
-- Purpose: a running task's progress (`ctx.progress(value)`), fenced: only while the worker still holds
--   the task under its token. Stored on the task's index when it is tracked (a value with a higher
--   sequence than the one stored), and published to a send() caller who asked for progress.
-- Includes: guard, finishTask, track
-- Builds keys: the processing hash and the index are named from the base in KEYS[1]
--   (`<base>:processing:<worker>`, `<base>:task:<id>`, as `QueueKeys` spells them); same hash tag.
-- KEYS[1]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group); not a key itself
-- ARGV[1]: worker id; ARGV[2]: fencing token; ARGV[3]: task id when tracked, else ''; ARGV[4]: sequence of
--   this value within the run (from 1); ARGV[5]: the value (JSON); ARGV[6]: the caller's reply channel
--   ('' none); ARGV[7]: the message to publish on it (JSON)
-- Returns: 1 when reported; 0 when the token is no longer held (lease lost or cancelled: nothing changed)
-- Side effects: HSET of the index's progress and pseq (only a later sequence: a resent call changes
--   nothing); PUBLISH of the message (a resent call publishes it again, with the same sequence, which the
--   caller drops); an index of another type quarantined (see guard).
local base = KEYS[1]
if checkedCall('hash', 'HEXISTS', base .. ':processing:' .. ARGV[1], ARGV[2]) == 0 then
  return 0
end
local key = ''
if ARGV[3] ~= '' then
  key = base .. ':task:' .. ARGV[3]
end
local index = trackedIndex(base .. ':faults', key, 'pseq')
if index then
  local seq = tonumber(ARGV[4]) or 0
  if seq > (tonumber(index[3]) or 0) then
    redis.call('HSET', key, 'progress', ARGV[5], 'pseq', seq)
  end
end
if ARGV[6] ~= '' then
  redis.call('PUBLISH', ARGV[6], ARGV[7])
end
return 1
