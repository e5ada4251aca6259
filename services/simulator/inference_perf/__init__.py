"""``headroom sim inference-perf``: an inference-perf benchmark run against one simulated pod in
virtual time, reported in inference-perf's own ``lifecycle_metrics`` format.

- ``config``: reads an inference-perf config YAML (the parts that shape the request stream);
- ``datagen``: the prompts (``shared_prefix`` and ``random`` data, as inference-perf draws
  them: random token ids);
- ``load``: arrival times (``constant`` and ``poisson`` timers), stage plans, the sweep's
  saturation probe;
- ``client``: the load generator's workers in virtual time (concurrency slots, streamed
  token timestamps) driving one :class:`~services.simulator.virtual_pod.VirtualPod`;
- ``report``: ``stage_N_lifecycle_metrics.json`` / ``summary_lifecycle_metrics.json`` with
  inference-perf's field layout and metric definitions;
- ``cli``: the command.

Source of every definition: kubernetes-sigs/inference-perf (``inference_perf/loadgen``,
``inference_perf/datagen``, ``inference_perf/reportgen/base.py``, ``inference_perf/apis``);
the docstrings name the functions.
"""
