/**
 * Hands a claim's tasks to the worker in reply order (the first `started` of them: none when closing), each
 * with whether the claim recorded it running (its places in `recorded`: 1-based, rising; see ClaimReply.started)
 * and then its index's keep (`keeps`, in the order of `recorded`; see ClaimReply.keeps).
 */
export function dispatchClaimed(
  pairs: readonly string[],
  recorded: readonly number[],
  keeps: readonly string[],
  started: number,
  onClaimed: (token: string, entry: string, recorded: boolean, keep?: string) => void,
): void {
  let next = 0;
  for (let i = 0; i < started; i++) {
    if (next < recorded.length && recorded[next] === i + 1) {
      onClaimed(pairs[2 * i], pairs[2 * i + 1], true, keeps[next] || undefined);
      next++;
    } else {
      onClaimed(pairs[2 * i], pairs[2 * i + 1], false);
    }
  }
}
