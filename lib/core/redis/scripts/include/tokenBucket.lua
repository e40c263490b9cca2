-- include/tokenBucket.lua — the per-client rate limit of claimTasks (its header says "Includes: tokenBucket").
-- A client limited to `rate` tasks per second has a bucket of at most a tenth of a second's worth (at
-- least 1), refilled continuously; each task started takes one. Stored in the buckets hash as
-- "<tokens>:<last refill ms>" (Redis clock).
-- bucketTokens(buckets, client, rate, now)
--   The tokens the client has now (a fractional number; a full bucket when none is stored, or when the
--   stored value is not one this script wrote).
-- keepBucket(buckets, client, tokens, now)
--   Stores the client's tokens as of `now` (after taking one, or when it leaves the ring throttled).
local function bucketTokens(buckets, client, rate, now)
  local capacity = math.max(1, math.ceil(rate / 10))
  local bucket = redis.call('HGET', buckets, client)
  if bucket then
    local held, last = string.match(bucket, '^([%d%.]+):(%d+)$')
    if held and tonumber(held) then
      return math.min(capacity, tonumber(held) + (now - tonumber(last)) * rate / 1000)
    end
  end
  return capacity
end

local function keepBucket(buckets, client, tokens, now)
  redis.call('HSET', buckets, client, string.format('%.6f:%d', tokens, now))
end
