"""An example of your own reward (`reward.function: user_rewards/brevity.py:score`): the
built-in verifier's, with a solved completion worth less the longer it runs past 400
characters (down to half at 1,200 and beyond). Files here are DVC dependencies of every stage
that scores completions (validate, profile, guide, train, evaluate): editing one reruns them.

The signature is the contract: (domain, completion, answer) -> a float in [0, 1], 1 = solved.
"""

from grpo_core.rewards.verify import verify_batch

FREE_CHARS = 400
HALF_AT_CHARS = 1200


def score(domain: str, completion: str, answer: str) -> float:
    (solved,) = verify_batch([domain], [completion], [answer])
    over = min(max(len(completion) - FREE_CHARS, 0), HALF_AT_CHARS - FREE_CHARS)
    return solved * (1.0 - 0.5 * over / (HALF_AT_CHARS - FREE_CHARS))
