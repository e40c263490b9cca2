/**
 * A loop's life: started once, its end awaited by whoever closes it, and a death (it returned or threw
 * while it should still run: a bug or an unexpected error) kept for the watchdog, which starts it again.
 */
export class LoopLife {
  private done: Promise<void> | undefined;
  private failure: { error: unknown } | undefined;

  constructor(
    private readonly name: string,
    private readonly run: () => Promise<void>,
    private readonly stopped: () => boolean,
  ) {}

  start(): void {
    this.done ??= this.run().then(
      () => {
        if (!this.stopped()) this.failure = { error: new Error(`the ${this.name} returned without being closed`) };
      },
      (error: unknown) => {
        this.failure = { error };
      },
    );
  }

  /** The error that ended the loop while it should still run, if that happened. */
  get died(): { error: unknown } | undefined {
    return this.failure;
  }

  /** Starts a loop that died again. */
  restart(): void {
    if (this.stopped()) return;
    this.failure = undefined;
    this.done = undefined;
    this.start();
  }

  /** Resolves once the loop ended (at once if it never started). */
  async ended(): Promise<void> {
    await this.done;
  }
}
