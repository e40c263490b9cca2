/**
 * Hands a claim's tasks to the worker in reply order (the first `started` of them: none when closing), each
 * with whether the claim recorded it running (its places in `recorded`: 1-based, rising; see ClaimReply.started).
 */
export function dispatchClaimed(
  pairs: readonly string[],
  recorded: readonly number[],
  started: number,
  onClaimed: (token: string, entry: string, recorded: boolean) => void,
): void {
  let next = 0;
  for (let i = 0; i < started; i++) {
    const isRecorded = next < recorded.length && recorded[next] === i + 1;
    if (isRecorded) next++;
    onClaimed(pairs[2 * i], pairs[2 * i + 1], isRecorded);
  }
}
