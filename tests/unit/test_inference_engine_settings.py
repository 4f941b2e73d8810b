"""The embedded server's settings cross the process boundary as one JSON document: the
launcher's object is the server's object, and a bad document is one line and exit 2."""

from __future__ import annotations

import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.launch import embedded_command

pytestmark = pytest.mark.unit


def test_the_document_round_trips_through_the_servers_parser(tmp_path):
    from swefleet.inference.engine.server import _parse

    cfg = InferenceConfig(model_name="policy", cpu_threads=3, max_batch_size=5, max_queue=7,
                          kv_mode="static", kv_capacity=512, cuda_graphs=False,
                          prefix_cache_mb=0, dtype="bfloat16", host="127.0.0.2", device="cuda")
    sent = EngineSettings.from_inference(cfg, tmp_path / "ckpt", port=8123, device="cuda:1",
                                         policy_version=4, gpu_memory_fraction=0.4)
    argv = embedded_command(sent)
    assert argv[1:4] == ["-m", "swefleet.inference.engine.server", "--settings"]
    got, port_file = _parse([*argv[3:], "--port-file", "pf"])
    assert got == sent and port_file == "pf"
    assert got.model_dump() == {
        "model_dir": str(tmp_path / "ckpt"), "host": "127.0.0.2", "port": 8123,
        "device": "cuda:1", "dtype": "bfloat16", "max_batch_size": 5, "max_queue": 7,
        "policy_version": 4, "threads": 3, "kv_mode": "static", "kv_capacity": 512,
        "cuda_graphs": False, "prefix_cache": True, "prefix_cache_mb": 0.0,
        "routed_experts": True, "served_model_names": ["policy"], "gpu_memory_fraction": 0.4,
        "log_level": "info",
    }
    assert EngineSettings.from_inference(InferenceConfig(), "m").served_model_names == []


@pytest.mark.parametrize("doc,named", [
    ('{"model_dir": "m", "max_batch_sise": 4}', "max_batch_sise: Extra inputs"),
    ('{"model_dir": "m", "kv_mode": "paged", "port": -1}', "kv_mode: Input should be"),
    ('{"port": 1}', "model_dir: Field required"),
    ('{"model_dir": "m",', "document: Invalid JSON"),
])  # fmt: skip
def test_a_bad_document_is_one_line_and_exit_2(capsys, doc, named):
    from swefleet.inference.engine.server import _parse

    with pytest.raises(ValueError) as err:
        EngineSettings.from_json(doc)
    assert named in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SystemExit) as exit_:
        _parse(["--settings", doc])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "bad engine settings" in lines[0] and named in lines[0]
