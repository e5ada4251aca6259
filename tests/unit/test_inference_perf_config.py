"""The inference-perf config reader on the shipped config (a copy under tests/data, with its
licence and attribution) and on the other shapes it accepts or refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from services.simulator.inference_perf.config import (
    DEFAULT_PERCENTILES,
    Distribution,
    parse_config,
    read_config,
)

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "inference_perf" / "config.yaml"


def test_the_shipped_config():
    c = read_config(SHIPPED)
    assert (c.api_type, c.streaming, c.data_type) == ("completion", True, "shared_prefix")
    sp = c.shared_prefix
    assert (sp.num_groups, sp.num_prompts_per_group) == (10, 10)
    assert (sp.system_prompt_len, sp.question_len, sp.output_len) == (128, 64, 64)
    assert c.random is None
    load = c.load
    assert (load.type, load.interval, load.stages) == ("constant", 1.0, ())
    sw = load.sweep
    assert (sw.type, sw.timeout, sw.num_stages, sw.stage_duration) == ("linear", 180, 7, 60)
    # inference-perf's SweepConfig defaults for what the file leaves out
    assert (sw.num_requests, sw.saturation_percentile) == (2000, 95.0)
    assert (load.num_workers, load.worker_max_concurrency, load.concurrency) == (44, 10, 440)
    assert c.ignore_eos is True
    assert c.model_name == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert c.percentiles == DEFAULT_PERCENTILES
    # what does not shape the request stream is kept, not lost
    assert {"metrics", "storage", "tokenizer", "server.base_url", "server.type"} <= set(c.ignored)


def test_licence_and_attribution_travel_with_the_copy():
    readme = (SHIPPED.parent / "README.md").read_text()
    assert "Apache" in readme and "kubernetes-sigs/inference-perf" in readme and "7de5ef2" in readme


def base_config(**over) -> dict:
    cfg = yaml.safe_load(SHIPPED.read_text())
    for path, value in over.items():
        node = cfg
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return cfg


def test_stages_poisson_random_data_and_percentiles():
    cfg = base_config(**{
        "load.type": "poisson", "load.sweep": None,
        "load.stages": [{"rate": 5, "duration": 10}, {"rate": 7.5, "duration": 4}],
        "data": {"type": "random",
                 "input_distribution": {"min": 10, "max": 500, "mean": 200, "std_dev": 50,
                                        "total_count": 100},
                 "output_distribution": {"min": 5, "max": 80, "mean": 40, "std_dev": 10,
                                         "total_count": 100}},
        "report.request_lifecycle.percentiles": [50, 90, 99],
    })  # fmt: skip
    c = parse_config(cfg)
    assert c.load.type == "poisson" and c.load.sweep is None
    assert [(s.rate, s.duration) for s in c.load.stages] == [(5.0, 10.0), (7.5, 4.0)]
    assert c.random.input_distribution == Distribution(10, 500, 200, 50, 100)
    assert c.shared_prefix is None and c.percentiles == (50.0, 90.0, 99.0)


def test_new_field_names_and_defaults():
    c = parse_config(base_config(**{
        "data.shared_prefix": {"num_groups": 3, "num_prompts_per_group": 2},
        "load.num_workers": None, "load.worker_max_concurrency": None,
    }))  # fmt: skip
    sp = c.shared_prefix
    assert (sp.num_groups, sp.num_prompts_per_group) == (3, 2)
    assert (sp.system_prompt_len, sp.question_len, sp.output_len) == (100, 50, 50)
    assert c.load.worker_max_concurrency == 100 and c.load.num_workers >= 1


@pytest.mark.parametrize(
    "over, match",
    [
        ({"api.type": "chat"}, "only completion"),
        ({"data.type": "shareGPT"}, "not supported"),
        ({"data.shared_prefix.enable_multi_turn_chat": True}, "multi_turn"),
        ({"data.shared_prefix.system_prompt_len": -1}, "non-negative"),
        ({"data.shared_prefix.typo_len": 3}, "unknown keys"),
        ({"load.type": "trace_replay"}, "not supported"),
        ({"load.sweep": None}, "stages or a sweep"),
        ({"load.sweep.type": "log"}, "sweep.type"),
        ({"load.sweep": {"type": "linear", "num_stage": 3}}, "unknown keys"),
        ({"load.sweep": None, "load.stages": [{"rate": 0, "duration": 3}]}, "must be > 0"),
        ({"load.worker_max_concurrency": 0}, ">= 1"),
        ({"data": {"type": "random", "input_distribution": {"mean": 5}}}, "output_distribution"),
    ],
)
def test_what_cannot_be_simulated_is_an_error(over, match):
    with pytest.raises(ValueError, match=match):
        parse_config(base_config(**over))


def test_read_config_rejects_broken_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("api: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        read_config(p)
