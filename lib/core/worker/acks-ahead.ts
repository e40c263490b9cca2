import type { ClaimReply, ScriptGateway } from '../redis/gateway.js';
import type { TakenAck } from './claim-acks.js';
import { sleep } from '../support/logger.js';

/**
 * The acknowledgements a claim loop sends ahead of its idle wait, on the wait's own connection and in its write
 * (see ClaimLoop.waitForWork): answered at once, since Redis runs them before the blocking read. Closing the loop
 * cuts that connection, so it first lets them be answered: cut before, they would fail, be sent again, and be
 * found gone (reported as lost leases) when their first sending had gone through.
 */
export class AcksAhead {
  private answering: Promise<unknown> | undefined;

  constructor(
    /** The call that acknowledges `taken` (claiming nothing) on a gateway. */
    private readonly send: (gateway: Pick<ScriptGateway, 'claim'>, taken: TakenAck[]) => Promise<ClaimReply>,
    /** Acts on its answer (or failure: then false, and the acknowledgements are back in the loop's queue). */
    private readonly answered: (taken: TakenAck[], replied: PromiseSettledResult<ClaimReply>) => Promise<boolean>,
    /** Sends the queued acknowledgements on their own (those that failed here, back in the queue). */
    private readonly resend: () => void,
  ) {}

  /** What an idle wait sends ahead of itself for `taken` (nothing when there is none), tracked until answered. */
  of(taken: TakenAck[]): ((gateway: Pick<ScriptGateway, 'claim'>) => void) | undefined {
    if (taken.length === 0) return undefined;
    return (gateway) => {
      const answering = Promise.allSettled([this.send(gateway, taken)]).then(async ([replied]) => {
        if (!(await this.answered(taken, replied))) this.resend();
      });
      this.answering = answering;
      void answering.finally(() => {
        if (this.answering === answering) this.answering = undefined;
      });
    };
  }

  /** Resolves once what was sent is answered, or after `limitMs` (Redis stuck: then the cut fails it, and it is sent again). */
  async settled(limitMs: number): Promise<void> {
    if (this.answering) await Promise.race([this.answering, sleep(limitMs)]);
  }
}
