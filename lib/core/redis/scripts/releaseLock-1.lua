-- releaseLock-1.lua
-- Purpose: release a lock only if this process still owns it (it may have expired and been taken).
-- Includes: guard
-- KEYS[1]: the lock (string holding the owner's token)
-- ARGV[1]: the owner's token
-- Returns: 1 when released; 0 when the lock was not ours (any more)
-- Side effects: DEL of the lock when owned.
if checkedCall('string', 'GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
