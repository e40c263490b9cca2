/**
 * Runs `work` on each item in turn; one that fails leaves the rest done, and the first failure is thrown
 * after them (a fold or a due check of many batches or flows: one that cannot be settled holds up no other).
 */
export async function eachOf<T>(items: Iterable<T>, work: (item: T) => Promise<unknown>): Promise<void> {
  let failure: { error: unknown } | undefined;
  for (const item of items) {
    try {
      await work(item);
    } catch (error) {
      failure ??= { error };
    }
  }
  if (failure) throw failure.error;
}
