"""The validated-campaign cache: `status` skips pydantic on a text it has validated, and never
answers differently from a full validation (edited, corrupt, foreign or planted entries miss)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit import campaign_cache
from cockpit.campaign import CampaignError, load_campaign

from conftest import ROOT, run_cli

PROBE = """
import json, sys
from cockpit.campaign import load_campaign, CampaignError
try:
    campaign = load_campaign(sys.argv[1], cache=True)
    answer = {"id": campaign.id, "price": str(campaign.price), "rules": [r.id for r in campaign.model.stop_rules]}
except CampaignError as error:
    answer = {"error": str(error)}
answer["pydantic"] = "pydantic" in sys.modules
print(json.dumps(answer))
"""


def probe(directory: Path) -> dict:
    """Load the campaign with the cache in a fresh process: what it read, and whether pydantic came in."""
    result = subprocess.run([sys.executable, "-c", PROBE, str(directory)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def entries(directory: Path) -> list[Path]:
    folder = directory / ".cockpit" / campaign_cache.FOLDER
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


def test_a_second_status_reads_the_validated_campaign_without_pydantic(seed_campaign):
    first = probe(seed_campaign)
    assert first["pydantic"] is True and first["id"] == "sentiment-lora-2026-11"
    assert len(entries(seed_campaign)) == 1
    second = probe(seed_campaign)
    assert second["pydantic"] is False
    assert {k: v for k, v in second.items() if k != "pydantic"} == {k: v for k, v in first.items() if k != "pydantic"}


def test_status_through_the_command_line_keeps_the_entry_and_answers_the_same(seed_campaign):
    first = run_cli("status", str(seed_campaign), "--json")
    second = run_cli("status", str(seed_campaign), "--json")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert len(entries(seed_campaign)) == 1
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["campaign"] == b["campaign"] and a["lot"] == b["lot"]


def test_the_cached_model_equals_a_fresh_validation(seed_campaign):
    validated = load_campaign(seed_campaign, cache=True)
    cached = load_campaign(seed_campaign, cache=True)
    assert entries(seed_campaign)
    assert cached.model == validated.model == load_campaign(seed_campaign).model
    assert cached.warnings == validated.warnings
    assert cached.items == validated.items


def test_an_edited_campaign_is_validated_again_and_its_errors_are_reported(seed_campaign):
    assert probe(seed_campaign)["pydantic"] is True
    path = seed_campaign / "campaign.toml"
    path.write_text(path.read_text().replace('price_usd = "47.14"', 'price_usd = "47.145"'))
    answer = probe(seed_campaign)
    assert answer["pydantic"] is True
    assert "price_usd: must be whole cents" in answer["error"]


def test_a_corrupt_entry_is_a_miss_not_an_error(seed_campaign):
    load_campaign(seed_campaign, cache=True)
    (entry,) = entries(seed_campaign)
    entry.write_bytes(b"\x80\x05not a pickle")
    campaign = load_campaign(seed_campaign, cache=True)
    assert campaign.model == load_campaign(seed_campaign).model


def test_a_planted_pickle_runs_nothing(seed_campaign, tmp_path):
    load_campaign(seed_campaign, cache=True)
    (entry,) = entries(seed_campaign)
    marker = tmp_path / "pwned"

    class Planted:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    entry.write_bytes(pickle.dumps(Planted(), protocol=5))
    assert probe(seed_campaign)["pydantic"] is True  # refused, validated again
    assert not marker.exists()


def test_an_entry_others_could_write_is_ignored(seed_campaign):
    load_campaign(seed_campaign, cache=True)
    (entry,) = entries(seed_campaign)
    entry.chmod(0o666)
    assert campaign_cache.lookup(seed_campaign.resolve(), (seed_campaign / "campaign.toml").read_text()) is None
    entry.chmod(0o640)
    entry.parent.chmod(0o777)
    assert campaign_cache.lookup(seed_campaign.resolve(), (seed_campaign / "campaign.toml").read_text()) is None


def test_a_symlinked_entry_is_not_followed(seed_campaign, tmp_path):
    load_campaign(seed_campaign, cache=True)
    (entry,) = entries(seed_campaign)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert campaign_cache.lookup(seed_campaign.resolve(), (seed_campaign / "campaign.toml").read_text()) is None


def test_a_change_of_code_misses(seed_campaign, monkeypatch):
    text = (seed_campaign / "campaign.toml").read_text()
    load_campaign(seed_campaign, cache=True)
    assert campaign_cache.lookup(seed_campaign.resolve(), text) is not None
    monkeypatch.setattr(campaign_cache, "_CODE", b"another version of the cockpit")
    monkeypatch.setattr(campaign_cache, "_CODE_KNOWN", True)
    assert campaign_cache.lookup(seed_campaign.resolve(), text) is None


def test_only_the_newest_entries_are_kept(seed_campaign):
    path = seed_campaign / "campaign.toml"
    original = path.read_text()
    for n in range(campaign_cache.KEEP + 3):
        path.write_text(original + f"\n# edit {n}\n")
        load_campaign(seed_campaign, cache=True)
    assert len(entries(seed_campaign)) == campaign_cache.KEEP
    assert campaign_cache.lookup(seed_campaign.resolve(), path.read_text()) is not None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a read-only folder")
def test_a_folder_that_cannot_be_written_only_costs_the_cache(seed_campaign):
    (seed_campaign / ".cockpit").mkdir()
    (seed_campaign / ".cockpit").chmod(0o500)
    try:
        assert load_campaign(seed_campaign, cache=True).id == "sentiment-lora-2026-11"
        assert entries(seed_campaign) == []
    finally:
        (seed_campaign / ".cockpit").chmod(0o750)


def test_a_full_disk_only_costs_the_cache(seed_campaign, monkeypatch):
    real_write = os.write

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(campaign_cache.os, "write", full)
    assert load_campaign(seed_campaign, cache=True).id == "sentiment-lora-2026-11"
    monkeypatch.setattr(campaign_cache.os, "write", real_write)
    assert entries(seed_campaign) == []
    assert not [p for p in (seed_campaign / ".cockpit" / campaign_cache.FOLDER).iterdir()]  # no temporary left


def test_check_always_validates_and_writes_nothing(seed_campaign):
    result = run_cli("check", str(seed_campaign))
    assert result.returncode == 0, result.stderr
    assert not (seed_campaign / ".cockpit").exists()


def test_an_invalid_campaign_is_never_kept(seed_campaign):
    path = seed_campaign / "campaign.toml"
    path.write_text(path.read_text().replace("days = 3", "days = -3"))
    with pytest.raises(CampaignError):
        load_campaign(seed_campaign, cache=True)
    assert entries(seed_campaign) == []


def test_a_validated_folder_that_is_a_link_is_not_trusted(seed_campaign, tmp_path):
    load_campaign(seed_campaign, cache=True)
    folder = seed_campaign / ".cockpit" / campaign_cache.FOLDER
    elsewhere = tmp_path / "elsewhere-folder"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere, target_is_directory=True)
    assert campaign_cache.lookup(seed_campaign.resolve(), (seed_campaign / "campaign.toml").read_text()) is None


def test_an_entry_moved_under_another_texts_name_is_a_miss(seed_campaign):
    path = seed_campaign / "campaign.toml"
    original = path.read_text()
    load_campaign(seed_campaign, cache=True)
    (entry,) = entries(seed_campaign)
    edited = original.replace('price_usd = "47.14"', 'price_usd = "47.15"')
    entry.rename(entry.with_name(campaign_cache._key(edited)))
    assert campaign_cache.lookup(seed_campaign.resolve(), edited) is None


def test_what_a_killed_writer_left_is_removed_once_old(seed_campaign):
    load_campaign(seed_campaign, cache=True)
    folder = seed_campaign / ".cockpit" / campaign_cache.FOLDER
    old = folder / f".{'a' * 64}.999999.1.tmp"
    fresh = folder / f".{'b' * 64}.999999.1.tmp"
    old.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(old, (0, 0))
    path = seed_campaign / "campaign.toml"
    path.write_text(path.read_text() + "\n# edited\n")
    load_campaign(seed_campaign, cache=True)  # a new entry: the folder is tidied
    assert not old.exists() and fresh.exists()


def test_nothing_is_kept_when_the_code_cannot_be_told(seed_campaign, monkeypatch):
    monkeypatch.setattr(campaign_cache, "_CODE", None)
    monkeypatch.setattr(campaign_cache, "_CODE_KNOWN", True)
    assert load_campaign(seed_campaign, cache=True).id == "sentiment-lora-2026-11"
    assert entries(seed_campaign) == []


def test_a_folder_others_can_write_gets_no_entry(seed_campaign):
    folder = seed_campaign / ".cockpit" / campaign_cache.FOLDER
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert load_campaign(seed_campaign, cache=True).id == "sentiment-lora-2026-11"
    assert list(folder.iterdir()) == []


def test_the_code_digest_covers_the_validator_and_the_catalogue():
    digest = campaign_cache._code_digest()
    assert digest is not None and len(digest) == 32
    assert "catalog.py" in campaign_cache._SOURCES and "data/catalog.json" in campaign_cache._SOURCES
    assert campaign_cache._VALIDATORS == ("pydantic", "pydantic_core")
