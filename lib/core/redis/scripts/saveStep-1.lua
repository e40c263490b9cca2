-- saveStep-1.lua
-- Purpose: a durable step of a running task (`ctx.step`, `ctx.checkpoint`), fenced: written only while the
--   worker still holds the task under its fencing token, so a run whose lease was taken over (or whose task
--   was cancelled or superseded) writes nothing. A step's result is written once: a later save of the same
--   step keeps the first (a resent call changes nothing).
-- Includes: guard
-- Builds keys: the processing hash `<base>:processing:<worker>` and the task's steps `<base>:steps:<id>` are
--   named from the base in KEYS[1] (as `QueueKeys` spells them; see include/steps.lua); same hash tag.
-- KEYS[1]: the keys' base, `prefix:{pattern...}` (`<root>:g:<group>` for a consumer group); not a key itself
-- ARGV[1]: worker id; ARGV[2]: fencing token; ARGV[3]: task id; ARGV[4]: what: `result` (a step finished),
--   `checkpoint` (the run's cursor) or `failure` (a step failed); ARGV[5]: the step's name ('' for a
--   checkpoint); ARGV[6]: the value (encoded result or checkpoint; '' for a failure); ARGV[7]: the steps'
--   TTL in milliseconds, renewed by this call; 0 to leave it (the run renewed it lately)
-- Returns: 0 when the token is no longer held (nothing changed); result: 1 saved, 2 saved before (kept);
--   checkpoint: 1; failure: the step's failures so far (from 1)
-- Side effects: HSETNX of `r:<name>` and HINCRBY of `done` (a new result only), HSET of `cp`, or HINCRBY of
--   `f:<name>`; PEXPIRE of the steps key (unless ARGV[7] is 0); a steps key of another type quarantined (see guard).
local base = KEYS[1]
if checkedCall('hash', 'HEXISTS', base .. ':processing:' .. ARGV[1], ARGV[2]) == 0 then
  return 0
end
local key = base .. ':steps:' .. ARGV[3]
local faults = base .. ':faults'
-- The first write heals a key of another type (set aside, recorded), at no cost when the key is sound.
local what, answer = ARGV[4], 1
if what == 'result' then
  if healingCall(faults, 'hash', 'HSETNX', key, 'r:' .. ARGV[5], ARGV[6]) == 1 then
    redis.call('HINCRBY', key, 'done', 1)
  else
    answer = 2
  end
elseif what == 'checkpoint' then
  healingCall(faults, 'hash', 'HSET', key, 'cp', ARGV[6])
else
  answer = healingCall(faults, 'hash', 'HINCRBY', key, 'f:' .. ARGV[5], 1)
end
local keep = tonumber(ARGV[7]) or 0
if keep > 0 then
  redis.call('PEXPIRE', key, keep)
end
return answer
