/**
 * What a pattern is doing, in one word that the CLI, the dashboard and `RedisTaskAdmin.stats()` share:
 * - `paused`: workers claim nothing from it (`pause`), whatever workers it has;
 * - `no worker`: no live worker consumes it (none registered, or every lease expired: dead or hung), so
 *   its tasks wait; a misspelt pattern shows so;
 * - `running`: at least one live worker consumes it.
 */
export type PatternState = 'paused' | 'no worker' | 'running';

export function patternState(pattern: { readonly paused: boolean; readonly workersAlive: number }): PatternState {
  if (pattern.paused) return 'paused';
  return pattern.workersAlive > 0 ? 'running' : 'no worker';
}
