"""Registries by name (moeproxy.registry): a name registered twice is refused, an unknown name lists
the known ones; every registry of the project is one (formats, detectors, families, feature methods,
job kinds, repro baselines), and the CLI lists the families as it lists the formats."""

from __future__ import annotations

import json

import pytest

from moeproxy.errors import InputError
from moeproxy.registry import Registry


def test_a_name_registered_twice_is_refused_and_an_unknown_one_names_the_known():
    colours = Registry("colour")
    colours.add("red", 1)

    @colours.register("blue")
    def blue():
        return 2

    assert colours == {"red": 1, "blue": blue} and colours.lookup("blue") is blue
    with pytest.raises(ValueError, match="colour 'red' registered twice"):
        colours.add("red", 3)
    assert colours["red"] == 1
    with pytest.raises(InputError, match="unknown colour 'green'; known: blue, red"):
        colours.lookup("green")


def test_every_registry_of_the_project_refuses_duplicates():
    from moeproxy.diagnose import all_detectors
    from moeproxy.diagnose.registry import DETECTORS
    from moeproxy.ingest import FORMATS
    from moeproxy.ingest.detect import detect_format  # noqa: F401  (registers every format)
    from moeproxy.jobs import JOB_KINDS
    from moeproxy.proxy.arch import FAMILIES, register
    from moeproxy.proxy.features import FEATURE_METHODS
    from moeproxy.repro.harness import BASELINES

    all_detectors()
    for registry in (FORMATS, DETECTORS, FAMILIES, FEATURE_METHODS, JOB_KINDS, BASELINES):
        assert isinstance(registry, Registry) and len(registry) >= 1, registry
        name = next(iter(registry))
        with pytest.raises(ValueError, match="registered twice"):
            registry.add(name, registry[name])
    with pytest.raises(ValueError, match="MoE family 'qwen3_moe' registered twice"):
        register(FAMILIES["qwen3_moe"])
    assert list(BASELINES) == ["cluster", "random", "dense", "replica"]


def test_families_command_lists_the_registered_families(capsys):
    from moeproxy.cli import main
    from moeproxy.proxy.arch import FAMILIES

    assert main(["families"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(FAMILIES)
    assert any(line.startswith("deepseek_v3") and "sigmoid_grouped" in line for line in lines)
    assert main(["families", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model_type"] for r in rows] == list(FAMILIES)
    assert {"model_type", "routing", "expert_count_keys", "layout", "notes"} == set(rows[0])
