import { Injectable } from '@nestjs/common';

/** Lets the sample wait until the worker has handled what it emitted. */
@Injectable()
export class Progress {
  private handled = 0;
  private waiters: { count: number; resolve: () => void }[] = [];

  done(): void {
    this.handled++;
    this.waiters = this.waiters.filter((waiter) => {
      if (this.handled >= waiter.count) {
        waiter.resolve();
        return false;
      }
      return true;
    });
  }

  whenHandled(count: number): Promise<void> {
    if (this.handled >= count) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }
}
