"""`cockpit schema`: the JSON Schema of campaign.toml accepts every sample campaign (TOML
date-times as ISO strings, as an editor sends them) and refuses a key the schema does not know."""

from __future__ import annotations

import json
import tomllib
from datetime import date, datetime, time
from pathlib import Path

import jsonschema
import pytest

from cockpit.cli import main
from tests.conftest import ROOT, SAMPLES, run_cli

CAMPAIGNS = sorted(SAMPLES.glob("*/campaign.toml")) + [ROOT / "cockpit" / "demo" / "template" / "campaign.toml"]


def as_json(value):
    """What a TOML value becomes in JSON: date-times, dates and times as ISO strings."""
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, (date, time)):
        return value.isoformat()
    return value


@pytest.fixture(scope="module")
def schema() -> dict:
    result = run_cli("schema")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(printed)
    return printed


def validator(schema: dict) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: p.parent.name)
def test_every_sample_validates_against_the_printed_schema(schema, path: Path):
    data = as_json(tomllib.loads(path.read_text()))
    errors = [e.message for e in validator(schema).iter_errors(data)]
    assert not errors, errors


def test_init_output_validates_against_the_schema(schema, tmp_path, capsys):
    assert main(["init", str(tmp_path / "c"), "--gpu", "RTX 4090", "--days", "30", "--start", "2026-11-30T08:00:00Z"]) == 0
    data = as_json(tomllib.loads((tmp_path / "c" / "campaign.toml").read_text()))
    assert not list(validator(schema).iter_errors(data))
    assert json.loads((tmp_path / "c" / "campaign.schema.json").read_text()) == schema


def test_the_schema_refuses_what_check_refuses(schema):
    data = as_json(tomllib.loads((SAMPLES / "sentiment-lora" / "campaign.toml").read_text()))
    for broken in (
        {**data, "colour": "red"},
        {**data, "schema": 2},
        {**data, "lot": {**data["lot"], "days": 0}},
        {**data, "run": [{**data["run"][0], "role": "baseline"}]},
        {**data, "lot": {k: v for k, v in data["lot"].items() if k != "gpu_model"}},
    ):
        assert list(validator(schema).iter_errors(broken)), broken
