"""`cockpit check DIR --json`: every finding as an object with its parts (file, line, table, item,
key, message, fix), exit 0 and `valid: true` for a good file, exit 1 and the JSON on stdout for a bad one."""

from __future__ import annotations

import json


def test_valid_campaign_gives_valid_true_and_no_findings(cli, seed_campaign):
    result = cli("check", str(seed_campaign), "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["valid"] is True and out["findings"] == []
    assert out["campaign"] == "sentiment-lora-2026-11"
    assert out["lot"]["price_usd"] == "47.14"


def test_invalid_campaign_gives_each_finding_in_parts(cli, seed_campaign):
    path = seed_campaign / "campaign.toml"
    text = path.read_text()
    text = text.replace("days = 3\n", "days = 3\ncolour = 1\n", 1)
    text = text.replace('id = "v-r16"\nrole = "variant"\ntier = "useful"\nhours = 12', 'id = "v-r16"\nrole = "variant"\ntier = "useful"\nhours = -1', 1)
    path.write_text(text)
    result = cli("check", str(seed_campaign), "--json")
    assert result.returncode == 1
    out = json.loads(result.stdout)
    assert out["valid"] is False
    by_key = {f["key"]: f for f in out["findings"]}
    colour = by_key["colour"]
    assert colour["table"] == "lot" and colour["item"] is None and colour["line"] == 18
    assert colour["file"].endswith("campaign.toml")
    assert "not a key" in colour["message"] and colour["fix"] == "check its spelling or remove it"
    hours = by_key["hours"]
    assert hours["table"] == "run" and hours["item"] == "v-r16" and isinstance(hours["line"], int)
    assert "greater than 0" in hours["message"] and hours["fix"] == "make hours greater than 0"


def test_toml_syntax_error_and_missing_file_are_json_too(cli, seed_campaign, tmp_path):
    (seed_campaign / "campaign.toml").write_text("schema = 1\nid = \n")
    out = json.loads(cli("check", str(seed_campaign), "--json").stdout)
    assert out["valid"] is False and out["findings"][0]["line"] == 2 and "not valid TOML" in out["findings"][0]["message"]
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("check", str(empty), "--json")
    assert result.returncode == 1
    finding = json.loads(result.stdout)["findings"][0]
    assert "no campaign file here" in finding["message"] and "cockpit init" in finding["fix"]


def test_an_empty_string_is_said_in_plain_words(cli, seed_campaign):
    path = seed_campaign / "campaign.toml"
    path.write_text(path.read_text().replace('path = "out/error_analysis.md"', 'path = ""'))
    finding = json.loads(cli("check", str(seed_campaign), "--json").stdout)["findings"][0]
    assert finding["message"] == "must not be empty (got '')" and finding["key"] == "path"
