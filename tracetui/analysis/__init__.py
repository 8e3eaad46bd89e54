"""From events to answers, along the data flow:

- :mod:`.runs`: events folded into runs (:class:`Results`, :class:`RunData`);
- :mod:`.stats`: quantiles, medians and their intervals, t quantiles;
- :mod:`.pairing`: two splits' steps paired by the rows they trained on;
- :mod:`.stopping`: ``--until-confident``'s rule, applied in the training process;
- :mod:`.summary`: one row per split (:func:`summarise`), filled by
- :mod:`.compare` (speedups with intervals), :mod:`.loss` (do the trials compute the same),
  :mod:`.diagnosis` (what bounds each split), :mod:`.context` (what the runs ran with and on);
- :mod:`.timing`: where each sweep's time went;
- :mod:`.answer`: the verdict and the recommendation in words.

Everything works on the event dicts of :mod:`tracetui.events.schema`, incrementally (the monitor feeds
events as they come) or from a log (``tracetui show``). The names other modules use are
imported here; each lives in one of the modules above.
"""

from .answer import (Policy, busy_mark, held_back, limit_words, recommendation, recommended_rows, scope_note,
                     sft_arguments, verdict)
from .compare import between_run_spread, paired_compare, paired_run_spread, run_medians
from .diagnosis import BOUNDS, MEMORY_SHARE, diagnose
from .loss import LOSS_TOLERANCE
from .pairing import StepKey, paired_log_ratios, step_keys
from .runs import LIVE_STATUSES, Results, RunData, repeat_mark
from .stats import (BOOTSTRAP, MIN_INTERVAL_STEPS, bootstrap_medians, enough_for_interval, median, median_ci,
                    order_stat_ci, quantile, ratio_ci, simultaneous_t, t975, t_quantile)
from .stopping import SETTLE_Z, StopRule, confident, settle_interval, settled, stop_reason
from .summary import PROBE_WHY, START_PARTS, Row, apportion, predicted_text, summarise
from .timing import step_span, time_line, time_spent

__all__ = [
    "BOOTSTRAP", "BOUNDS", "LIVE_STATUSES", "LOSS_TOLERANCE", "MEMORY_SHARE", "MIN_INTERVAL_STEPS", "PROBE_WHY",
    "SETTLE_Z", "START_PARTS", "Policy", "Results", "Row", "RunData", "StepKey", "StopRule", "apportion",
    "between_run_spread", "bootstrap_medians", "busy_mark", "confident", "diagnose", "enough_for_interval",
    "held_back", "limit_words", "median", "median_ci", "order_stat_ci", "paired_compare", "paired_log_ratios",
    "paired_run_spread", "predicted_text", "quantile", "ratio_ci", "recommendation", "recommended_rows",
    "repeat_mark", "run_medians", "scope_note", "settle_interval", "settled", "sft_arguments", "simultaneous_t",
    "step_keys", "step_span", "stop_reason", "summarise", "t975", "t_quantile", "time_line", "time_spent",
    "verdict",
]
