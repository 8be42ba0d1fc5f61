"""Every metric the app shows, defined once: per token, per response and per step.

Per token t (pi = policy, pi_ref = reference), following DESIGN.md:
  log_ratio_t = logprob_t - ref_logprob_t
  kl_t        = exp(r) - 1 - r with r = ref_logprob_t - logprob_t   (k3 estimator of KL(pi || pi_ref), >= 0)
  prob_t      = exp(logprob_t), ref_prob_t = exp(ref_logprob_t)
  return_t    = sum_{k >= t} token_reward_k   (gamma = 1)
  value_error_t = value_t - return_t
  infer_gap_t = logprob_t - inference logprob_t (trainer minus inference engine: NeMo-RL's
                generation_logprobs, veRL / OpenRLHF rollout_log_probs, prime-rl inference_logprobs)
Per response: sums and means over valid positions (both log-probs present and finite: the trainer's arrays
say which positions were scored, so a pad-looking token such as an eos that carries log-probs counts),
length in tokens without pads, reward gain = reward - ref_reward.

registry: names and labels; token, response, step: the metrics at each level; group: response groups
and prompts across steps; degeneration: repetition and length ratio.
"""

from data.metrics.metric import Metric
from data.metrics.registry import METRICS, label

__all__ = ["METRICS", "Metric", "label"]
