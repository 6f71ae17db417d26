"""campaign.toml schema 1: the samples load, and every malformed file gets one clear message naming the key."""

from __future__ import annotations

import subprocess
import sys

from decimal import Decimal
from pathlib import Path

import pytest

from cockpit.plan.campaign import CampaignError
from cockpit.plan.load import load_campaign, read_campaign_text
from tests.conftest import SAMPLES

SEED = (SAMPLES / "sentiment-lora" / "campaign.toml").read_text()


def errors_of(text: str) -> list[str]:
    with pytest.raises(CampaignError) as caught:
        read_campaign_text(text, Path("."))
    return [str(f) for f in caught.value.findings]


def test_samples_load_with_exact_money():
    seed = load_campaign(SAMPLES / "sentiment-lora")
    assert seed.price == Decimal("47.14") and isinstance(seed.price, Decimal)
    assert seed.lot.gpu_count == 1 and seed.lot.window_hours == 72
    assert [i.id for i in seed.items] == ["setup", "data-check", "ctrl-r1", "resume-test", "v-r16", "v-r64", "error-analysis"]
    assert seed.model.expenses[0].usd == Decimal("3.10")
    b200 = load_campaign(SAMPLES / "b200-week")
    assert b200.lot.gpu_count == 2 and b200.price == Decimal("1450.00")


def test_price_comes_from_the_catalogue_when_not_written():
    campaign = read_campaign_text(SEED.replace('price_usd = "47.14"\n', "").replace("days = 3", "days = 7"), Path("."))
    assert campaign.price == Decimal("110.00")


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("hours = 12                     # end", "hours = -3 # end", "[[run]] 'ctrl-r1' → hours: must be greater than 0 (got -3)"),
        ("hours = 4                      # env", "hours = 0 # env", "[[task]] 'setup' → hours: must be greater than 0 (got 0)"),
        ('kind = "human"\nhours = 4', 'kind = "robot"\nhours = 4', "[[task]] 'setup' → kind: must be one of human or machine (got 'robot')"),
        ('role = "control"', 'role = "ctrl"', "[[run]] 'ctrl-r1' → role: must be one of control or variant"),
        ('tier = "useful"', 'tier = "nice"', "[[run]] 'v-r16' → tier: must be one of indispensable, useful or exploratory"),
        ('direction = "max"', 'direction = "up"', "[closing] → direction: must be one of max or min"),
        ('action = "alert"', 'action = "kill"', "[[stop_rule]] 'nan-loss' → action: must be one of alert or stop"),
        ('kind = "stalled"', 'kind = "slow"', "[[stop_rule]] 'stalled' → kind: must be one of non_finite, below"),
        ('kind = "predictions"\npath = "out/ctrl', 'kind = "preds"\npath = "out/ctrl', "[[deliverable]] 'ctrl-r1/predictions' → kind: must be one of"),
        ('id = "v-r64"', 'id = "v-r16"', "[[run]] 'v-r16' → id: 'v-r16' is already the id of a [[run]]"),
        ('id = "error-analysis/report"', 'id = "setup"', "[[deliverable]] 'setup' → id: 'setup' is already the id of a [[task]]"),
        ('after = ["setup"]', 'after = ["error-analysis"]', "dependency cycle: data-check → ctrl-r1 → error-analysis → data-check"),
        ('after = ["resume-test"]\ntotal_steps = 20000\n\n[[run]]\nid = "v-r64"', 'after = ["resume"]\ntotal_steps = 20000\n\n[[run]]\nid = "v-r64"', "[[run]] 'v-r16' → after: names 'resume', which is no task or run"),
        ('gpus = [0]\nafter = ["data-check"]', 'gpus = [1]\nafter = ["data-check"]', "[[run]] 'ctrl-r1' → gpus: GPU 1 is not in the lot: a RTX 4090 lot holds 1 GPU"),
        ("gpus = 1\n", "gpus = 2\n", "[lot] → gpus: a catalogue RTX 4090 lot holds 1 GPU (got 2)"),
        ('"47.14"', '"47.145"', "[lot] → price_usd: must be whole cents, at most two decimals (got '47.145')"),
        ('"47.14"', '"-1.00"', "[lot] → price_usd: must not be negative"),
        ('"47.14"', '"lots"', "[lot] → price_usd: must be an amount in USD"),
        ('usd = "3.10"', 'usd = "3.1.0"', "[[expense]] 'object storage' → usd: must be an amount in USD"),
        ("threshold = 0.55\n", "", "[[stop_rule]] 'f1-floor': a 'below' rule needs threshold: add threshold = 0.55"),
        ("within_hours = 2\n", "", "[[stop_rule]] 'no-resume': a 'no_resume' rule needs within_hours"),
        ("minutes = 20\n", "", "[[stop_rule]] 'stalled': a 'stalled' rule needs minutes"),
        ('kind = "truncated"', 'kind = "truncated"\nthreshold = 3', "[[stop_rule]] 'truncated-input': threshold does not apply to a 'truncated' rule"),
        ('runs = ["v-r16", "v-r64"]', 'runs = ["v-r16", "v-r99"]', "[[stop_rule]] 'f1-floor' → runs: names 'v-r99', which is no [[run]]"),
        ('run = "ctrl-r1"\ndecide_after_hours', 'run = "nope"\ndecide_after_hours', "[pilot] → run: names 'nope', which is no [[run]]"),
        ('run = "v-r16"\nkind = "adapter"', 'run = "v-r99"\nkind = "adapter"', "[[deliverable]] 'v-r16/adapter' → run: names 'v-r99'"),
        ("2026-11-30T08:00:00Z", "2026-11-30T08:00:00", "[lot] → start: needs a time zone"),
        ("schema = 1", "schema = 2", "schema: this cockpit reads schema 1 (got 2)"),
        ("total_steps = 20000", "total_step = 20000", "[[run]] 'ctrl-r1' → total_step: is not a key of schema 1"),
        ("days = 3", 'days = "three"', "[lot] → days: must be a whole number (got 'three')"),
        ('gpu_model = "RTX 4090"\n', "", "[lot] → gpu_model: is missing"),
        ("retrieval_hours = 1", "retrieval_hours = 80", "[calendar] → retrieval_hours: retrieval alone (80 h) does not end before the lot's 72 h"),
        ('kind = "human"\nhours = 4', 'kind = "human"\ngpus = [0]\nhours = 4', "[[task]] 'setup': a human task occupies no GPU"),
        ("[[expense]]", "[expense]", "expense: must be an array of tables written [[expense]]"),
    ],
)
def test_each_malformed_file_names_the_key(old, new, expected):
    assert old in SEED, old
    messages = errors_of(SEED.replace(old, new, 1))
    assert any(expected in m for m in messages), messages
    assert all(m.startswith("campaign.toml: ") for m in messages)


def test_error_carries_the_toml_line():
    messages = errors_of(SEED.replace("hours = 12                     # end", "hours = -3 # end", 1))
    line = next(n for n, text in enumerate(SEED.splitlines(), 1) if text.startswith("hours = 12"))
    assert messages == [f"campaign.toml: [[run]] 'ctrl-r1' → hours: must be greater than 0 (got -3) (line {line})"]


def test_toml_syntax_error_names_the_line():
    (message,) = errors_of(SEED.replace("days = 3", "days = "))
    assert message.startswith("campaign.toml: not valid TOML") and "(line 17)" in message


def test_unknown_price_fails_and_says_so():
    (message,) = errors_of(SEED.replace('price_usd = "47.14"\n', "").replace("days = 3", "days = 5"))
    assert "[lot] → price_usd: the price of this lot is unknown" in message
    assert "3 days, 7 days, 30 days" in message
    b200 = (SAMPLES / "b200-week" / "campaign.toml").read_text()
    (message,) = errors_of(b200.replace('price_usd = "1450.00"', "# no price"))
    assert "the catalogue knows no price for a B200 lot" in message


def test_money_written_as_a_toml_number_stays_exact():
    campaign = read_campaign_text(SEED.replace('"47.14"', "47.14").replace('"3.10"', "3.1"), Path("."))
    assert campaign.price == Decimal("47.14") and str(campaign.model.expenses[0].usd) == "3.10"


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(CampaignError, match="no such folder"):
        load_campaign(tmp_path / "nowhere")
    with pytest.raises(CampaignError, match="no campaign file here"):
        load_campaign(tmp_path)
    (tmp_path / "campaign.toml").write_bytes(b"schema = 1\nid = \"\xff\"\n")
    with pytest.raises(CampaignError, match="is not UTF-8"):
        load_campaign(tmp_path)


def test_b200_lot_is_one_price_for_two_gpus():
    b200 = load_campaign(SAMPLES / "b200-week")
    assert b200.lot.gpu_count == 2
    assert [r.gpu_list for r in b200.runs] == [[0], [1], [0, 1]]


# ---------------------------------------------------------------- ids stay names, never paths


@pytest.mark.parametrize(
    "old, bad, table",
    [
        ('id = "ctrl-r1"\nrole', "a/../../../x", "[[run]]"),
        ('id = "ctrl-r1"\nrole', "../x", "[[run]]"),
        ('id = "ctrl-r1"\nrole', "/tmp/x", "[[run]]"),
        ('id = "ctrl-r1"\nrole', "ctrl\\r1", "[[run]]"),
        ('id = "ctrl-r1"\nrole', "ctrl\nr1", "[[run]]"),
        ('id = "ctrl-r1"\nrole', "a" * 65, "[[run]]"),
        ('id = "setup"', "setup/../..", "[[task]]"),
        ('id = "nan-loss"', "nan/loss", "[[stop_rule]]"),
        ('id = "ctrl-r1/predictions"', "ctrl-r1/../predictions", "[[deliverable]]"),
        ('id = "ctrl-r1/predictions"', "/ctrl-r1/predictions", "[[deliverable]]"),
        ('id = "ctrl-r1/predictions"', "ctrl-r1//predictions", "[[deliverable]]"),
        ('id = "ctrl-r1/predictions"', "ctrl-r1/predictions/", "[[deliverable]]"),
        ('id = "ctrl-r1/predictions"', "ctrl-r1\\predictions", "[[deliverable]]"),
        ('id = "ctrl-r1/predictions"', "ctrl-r1/\x07predictions", "[[deliverable]]"),
    ],
)
def test_an_id_that_is_not_a_plain_name_is_refused_with_the_pattern_and_an_example(old, bad, table):
    assert old in SEED, old
    written = bad.replace("\\", "\\\\").replace("\n", "\\n").replace("\x07", "\\u0007")
    messages = errors_of(SEED.replace(old, old.replace(old.split('"')[1], written), 1))
    (message,) = [m for m in messages if "→ id:" in m]
    assert table in message and repr(bad)[:40] in message
    assert "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$" in message
    assert "e.g." in message
    assert "\n" not in message and "\x07" not in message


def test_the_samples_ids_stay_valid():
    for sample in ("sentiment-lora", "b200-week", "demo"):
        campaign = load_campaign(SAMPLES / sample)
        assert campaign.model.deliverables, sample
    assert load_campaign(SAMPLES / "sentiment-lora").deliverable("ctrl-r1/predictions") is not None


def test_every_path_derived_from_an_id_stays_inside_the_campaign_folder(tmp_path):
    from cockpit.plan.campaign import Role, Run, campaign_path

    run = Run(id="a/../../../x", role=Role.control, hours=1)  # built directly: no validation
    with pytest.raises(ValueError, match="a/../../../x"):
        run.metrics_path(tmp_path)
    with pytest.raises(ValueError, match="leave the campaign folder"):
        campaign_path(tmp_path, "runs", "..", "..", "x")
    with pytest.raises(ValueError):
        campaign_path(tmp_path, "runs", "/etc", "passwd")
    good = Run(id="ctrl-r1", role=Role.control, hours=1)
    assert good.metrics_path(tmp_path) == tmp_path / "runs" / "ctrl-r1" / "metrics.jsonl"
    assert good.checkpoints_path(tmp_path) == tmp_path / "runs" / "ctrl-r1" / "checkpoints"
    explicit = Run(id="ctrl-r1", role=Role.control, hours=1, metrics="/scratch/ctrl/metrics.jsonl")
    assert explicit.metrics_path(tmp_path) == Path("/scratch/ctrl/metrics.jsonl")  # written on purpose: kept


def test_the_reporter_refuses_a_run_id_that_would_leave_the_campaign(tmp_path):
    from cockpit.feed.reporter import RunReporter

    with pytest.raises(ValueError, match="run id"):
        RunReporter(tmp_path, "a/../../../x")
    assert not (tmp_path.parent / "x").exists()


def test_the_tables_are_complete_at_run_time_without_the_schema_module():
    """The constraints are annotated_types' and cockpit.plan.values': nothing is injected at run time."""
    script = (
        "import sys, typing\n"
        "from cockpit.plan.campaign import Run, CampaignModel\n"
        "typing.get_type_hints(Run, include_extras=True); typing.get_type_hints(CampaignModel)\n"
        "assert 'cockpit.plan.schema' not in sys.modules and 'pydantic' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
