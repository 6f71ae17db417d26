"""`cockpit init DIR`: a commented campaign.toml that `check` accepts for every catalogue GPU and
duration, the price from the catalogue (or --price where it has none), never over an existing file."""

from __future__ import annotations

import tomllib

import pytest

from cockpit.plan import catalog
from cockpit.plan.schedule import plan_report
from cockpit.plan.load import load_campaign
from cockpit.cli import main
from tests.conftest import run_cli

START = "2026-11-30T08:00:00Z"


def _lots() -> list[tuple[str, int, str | None]]:
    """(GPU, days, --price) for every catalogue lot, and a user-priced lot for a model with none."""
    lots: list[tuple[str, int, str | None]] = []
    for name in catalog.known_models():
        offers = catalog.offers(name)
        lots += [(name, offer.days, None) for offer in offers]
        if not offers:
            lots += [(name, 7, "1234.50"), (name, 1, "99")]
    return lots


@pytest.mark.parametrize(("gpu", "days", "price"), _lots())
def test_init_output_passes_check_and_fits_its_lot(tmp_path, capsys, gpu, days, price):
    target = tmp_path / "c"
    args = ["init", str(target), "--gpu", gpu, "--days", str(days), "--start", START]
    if price:
        args += ["--price", price]
    assert main(args) == 0, capsys.readouterr().err
    campaign = load_campaign(target)
    assert campaign.lot.gpu_model == gpu and campaign.lot.days == days
    expected = catalog.price(gpu, days) if price is None else campaign.lot.price_usd
    assert campaign.price == expected and campaign.lot.start.isoformat() == "2026-11-30T08:00:00+00:00"
    assert [r.role.value for r in campaign.runs] == ["control", "variant"]
    assert any(t.kind.value == "human" for t in campaign.model.tasks)
    assert {r.kind.value for r in campaign.model.stop_rules} == {"non_finite", "below", "truncated", "no_resume", "stalled"}
    assert sorted(d.run for d in campaign.model.deliverables) == sorted(r.id for r in campaign.runs)
    assert campaign.warnings == ()
    assert plan_report(campaign).fit.fits
    text = (target / "campaign.toml").read_text()
    assert "after_step" in text and text.count("#") > 30  # the stop rules' parameters explained


def test_init_fills_the_catalogue_price_and_writes_the_schema_beside_it(tmp_path, capsys):
    assert main(["init", str(tmp_path / "c"), "--gpu", "rtx  4090", "--days", "7", "--start", START]) == 0
    raw = tomllib.loads((tmp_path / "c" / "campaign.toml").read_text())
    assert raw["lot"]["gpu_model"] == "RTX 4090" and raw["lot"]["price_usd"] == "110.00"
    assert (tmp_path / "c" / "campaign.schema.json").is_file()
    assert (tmp_path / "c" / "campaign.toml").read_text().startswith("#:schema ./campaign.schema.json\n")


def test_init_refuses_to_overwrite(tmp_path):
    (tmp_path / "campaign.toml").write_text("mine\n")
    result = run_cli("init", str(tmp_path), "--gpu", "RTX 4090", "--days", "3")
    assert result.returncode == 1 and "already exists" in result.stderr and "nothing was written" in result.stderr
    assert (tmp_path / "campaign.toml").read_text() == "mine\n"


@pytest.mark.parametrize(("args", "words"), [
    (["--gpu", "B200", "--days", "7"], ["--price", "B200"]),
    (["--gpu", "H100", "--days", "3"], ["--price", "not in the catalogue"]),
    (["--gpu", "RTX 4090", "--days", "5"], ["--days", "--price", "3, 7, 30"]),
    (["--days", "three"], ["whole number"]),
    (["--start", "2026-11-30T08:00:00"], ["zone"]),
    (["--price", "12.345"], ["two decimals"]),
])
def test_init_refusals_name_the_flag_and_write_nothing(tmp_path, capsys, args, words):
    target = tmp_path / "c"
    with pytest.raises(SystemExit) if words in (["whole number"], ["zone"]) else _no_raise():
        code = main(["init", str(target), *args])
        assert code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert not (target / "campaign.toml").exists()


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_init_without_terminal_or_flags_uses_defaults_and_says_which_flags(tmp_path):
    result = run_cli("init", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    assert "--gpu MODEL --days N --start ISO" in result.stdout
    assert run_cli("check", str(tmp_path / "c")).returncode == 0


def test_init_on_a_terminal_without_flags_asks_with_defaults(tmp_path, capsys, monkeypatch):
    from cockpit.commands import init

    answers = iter(["B200", "7", "", "2000"])  # GPU, days, start (the default), the price the catalogue lacks
    asked: list[str] = []
    monkeypatch.setattr(init, "_on_terminal", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or next(answers))
    assert main(["init", str(tmp_path / "c")]) == 0
    assert len(asked) == 4 and "[RTX 4090]" in asked[0]
    campaign = load_campaign(tmp_path / "c")
    assert campaign.lot.gpu_model == "B200" and campaign.lot.days == 7 and str(campaign.price) == "2000.00"
    assert campaign.lot.start.minute == 0
