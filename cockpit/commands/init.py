"""`cockpit init DIR [--gpu MODEL --days N --start ISO --price USD]`: write a commented
campaign.toml to start from — a control and one variant, a human setup task, the usual stop rules
and one deliverable per run — that `cockpit check` accepts as written. It never overwrites one."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from cockpit.plan import catalog
from cockpit.common.files import write_atomic
from cockpit.common.layout import CAMPAIGN_FILE
from cockpit.plan.values import CENT
from cockpit.errors import Finding, UsageError

DEFAULT_GPU = "RTX 4090"
DEFAULT_DAYS = 3
SCHEMA_FILE = "campaign.schema.json"
_COMMENTED = re.compile(r"^(\S.*?\S)\s{2,}(# .*)$")


def _next_hour(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def _toml_time(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _price(text: str) -> Decimal:
    try:
        amount = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        raise UsageError(f"--price must be an amount in USD such as 47.14 (got {text!r})") from None
    if not amount.is_finite() or amount <= 0 or amount != amount.quantize(CENT) or amount.adjusted() >= 12:
        raise UsageError(f"--price must be a positive amount in USD with at most two decimals, e.g. 47.14 (got {text!r})")
    return amount.quantize(CENT)


def _half_hours(value: float) -> str:
    """Half hours at least one: 17.5, 18."""
    rounded = max(1.0, round(value * 2) / 2)
    return f"{rounded:g}"


def _ask(question: str, default: str) -> str:
    try:
        answer = input(f"{question} [{default}]: ").strip()
    except EOFError:
        return default
    return answer or default


def _interactive(args) -> None:
    """On a terminal with no flag given: ask for the GPU, the days and the start, each with a default."""
    known = ", ".join(catalog.known_models())
    args.gpu = _ask(f"GPU model of the lot ({known}, or another)", DEFAULT_GPU)
    offers = catalog.offers(args.gpu)
    default_days = str(offers[0].days if offers else DEFAULT_DAYS)
    if offers:
        print(f"  catalogue lots: {', '.join(f'{o.days} days {o.price_usd} USD' for o in offers)}")
    while True:
        days = _ask("Days of the lot", default_days)
        if days.isdigit() and 1 <= int(days) <= 3660:
            args.days = int(days)
            break
        print("  a whole number of days, 1 to 3660")
    while True:
        start = _ask("Lot start (UTC, ISO 8601)", _toml_time(_next_hour(datetime.now(UTC))))
        try:
            moment = datetime.fromisoformat(start)
        except ValueError:
            print("  write it like 2026-11-30T08:00:00Z")
            continue
        args.start = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        break
    while args.price is None and catalog.price(args.gpu, args.days) is None:
        answer = _ask("Price of the whole lot in USD (the catalogue does not know it)", "")
        if not answer:
            return  # refused below, naming --price
        try:
            _price(answer)
        except UsageError:
            print("  an amount in USD with at most two decimals, e.g. 1234.50")
            continue
        args.price = answer


def _aligned(text: str) -> str:
    """Each trailing comment starts in one column, whatever the length of the value before it."""
    lines = []
    for line in text.splitlines():
        match = _COMMENTED.match(line)
        lines.append(f"{match.group(1).ljust(34)} {match.group(2)}" if match else line)
    return "\n".join(lines) + "\n"


def render(gpu: str, days: int, start: datetime, price: Decimal | None) -> str:
    """The commented campaign file for one lot; `price` None means the catalogue's."""
    entry = catalog.model(gpu)
    gpu_name = entry.name if entry else gpu
    gpus = entry.gpus_per_lot if entry else 1
    catalogue_price = catalog.price(gpu_name, days)
    window = days * 24.0
    run_hours = _half_hours(min(window * 0.25, 24 * 7))
    pilot_hours = _half_hours(min(2.0, float(run_hours) / 2))
    if price is None:
        assert catalogue_price is not None
        price_line = f'price_usd = "{catalogue_price}"          # the catalogue\'s price for this lot; the price of the whole lot, never per hour'
    else:
        price_line = f'price_usd = "{price}"          # the price you pay for the whole lot, with cents; never per hour'
    gpus_comment = "as the catalogue's lot holds" if entry else "how many GPUs the box holds: change it if it holds more"
    second_gpu = "gpus = [1]" if gpus > 1 else "gpus = [0]"
    variant_after = '["data-check"]' if gpus > 1 else '["ctrl-r1"]'
    return _aligned(f'''#:schema ./campaign.schema.json
# A campaign: a control and a variant on a fixed corpus, on one lot rented for a fixed price.
# Written by `cockpit init`; every key is described in docs/campaign-file.md of the cockpit.
# Edit it, then run `cockpit check .` (validates) and `cockpit plan .` (does it fit the lot?).
# `cockpit schema > campaign.schema.json` lets an editor check the file as you type.
schema = 1
id = "my-campaign"                 # names the campaign; a letter or digit, then letters, digits, . _ -
question = "Does the variant beat the control on the closing metric?"
corpus = "corpus-v1"               # the fixed corpus every run trains and evaluates on
# corpus_sha256 = "..."            # optional: 64 hex digits of the corpus archive

[closing]                          # what lets the campaign close: a variant reaching the threshold, or none (a negative result is a result)
metric = "eval/macro_f1"           # a value name your training loop writes to its metrics stream
direction = "max"                  # max: higher is better; min: lower is better
threshold = 0.80                   # the value a variant must reach

[lot]                              # the GPU box, rented for a fixed price and a fixed number of days
# order_ref = "..."                # the provider's order reference, once you have one
gpu_model = {_toml_string(gpu_name)}
gpus = {gpus}                   # {gpus_comment}
days = {days}
{price_line}
start = {_toml_time(start)}  # the lot's start, with a zone (Z is UTC); it ends {days} days later

[calendar]
retrieval_hours = 1                # copying results off the box at the end; must end before the lot does
warn_before_end_hours = [6, 1]     # an alert this many hours before the lot ends

[[task]]                           # work on the calendar that is not a monitored run
id = "setup"
kind = "human"                     # human: a person's time (one at a time); machine: occupies GPUs
hours = 2                          # environment, corpus copy, configs

[[task]]
id = "data-check"
kind = "machine"
tier = "indispensable"             # indispensable | useful | exploratory: what a reduced protocol keeps
hours = 1                          # tokenise the corpus, check lengths and ids
gpus = [0]                         # the GPU indexes it occupies
after = ["setup"]                  # starts once these ids are done

[[run]]                            # a monitored training run: it writes runs/<id>/metrics.jsonl
id = "ctrl-r1"
role = "control"                   # control | variant: the control is what variants are compared with
tier = "indispensable"
hours = {run_hours}                 # end to end: loading, long inputs, validation, output files
gpus = [0]
after = ["data-check"]
total_steps = 20000                # optimizer steps the run will take: gives progress and an ETA

[[run]]
id = "v-1"
role = "variant"
tier = "useful"
hours = {run_hours}
{second_gpu}
after = {variant_after}
total_steps = 20000

[pilot]                            # a decision point early in the pilot run: continue, drop-optional or revise
run = "ctrl-r1"
decide_after_hours = {pilot_hours}   # hours after the run starts

# Stop rules, written before the trials. Each raises an alert once per run until acknowledged;
# action = "stop" also records the stop and sends SIGTERM to the run's process.
[[stop_rule]]
id = "nan-loss"
kind = "non_finite"                # a NaN or infinite value
metric = "loss"                    # the value to watch (default: every value of the record)
action = "alert"                   # alert (default) | stop

[[stop_rule]]
id = "f1-floor"
kind = "below"                     # below | above: the metric passes the threshold
metric = "eval/macro_f1"
threshold = 0.55
after_step = 2000                  # only from this step on: early evaluations are always low
runs = ["v-1"]                     # the runs it applies to (default: every run)

[[stop_rule]]
id = "truncated-input"
kind = "truncated"                 # the run reported an essential input cut short

[[stop_rule]]
id = "no-resume"
kind = "no_resume"
within_hours = 2                   # no verified resume (cockpit verify-resume --record) within 2 h of the run's start

[[stop_rule]]
id = "stalled"
kind = "stalled"
minutes = 20                       # no metric line for 20 minutes while the run is alive

# What the campaign hands over: the closing verifies each and prices the accepted ones.
[[deliverable]]
id = "ctrl-r1/predictions"
run = "ctrl-r1"
kind = "predictions"               # predictions | error_analysis | artifact | adapter | report | other
path = "out/ctrl-r1/predictions.jsonl"
# expect_ids = "data/test_ids.txt" # optional: every id in that file must appear in the predictions

[[deliverable]]
id = "v-1/predictions"
run = "v-1"
kind = "predictions"
path = "out/v-1/predictions.jsonl"

# [[expense]]                      # a cost besides the lot, listed apart
# label = "object storage"
# usd = "3.10"
''')


def _write_schema(path: Path) -> bool:
    """The JSON Schema beside the file, for the `#:schema` directive; one already there is kept."""
    import json

    from cockpit.plan.schema import json_schema

    try:
        write_atomic(path, json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n", mode=0o666, replace=False)
    except OSError:  # there already, or not writable: the campaign file is what matters
        return False
    return True


def _check_lot(gpu: str, days: int, price: Decimal | None) -> None:
    if price is not None:
        return
    entry = catalog.model(gpu)
    if catalog.price(gpu, days) is not None:
        return
    if entry and entry.offers:
        durations = ", ".join(f"{o.days}" for o in entry.offers)
        raise UsageError(
            f"the catalogue prices {entry.name} lots of {durations} days only, not {days}; "
            f"give one of those with --days, or the price of the whole lot with --price, e.g. --price 123.45"
        )
    what = f"a {entry.name} lot" if entry else f"'{gpu}' (not in the catalogue: {', '.join(catalog.known_models())})"
    raise UsageError(f"the catalogue knows no price for {what}; give the price you pay for the whole lot with --price, e.g. --price 123.45")


def _on_terminal() -> bool:
    return bool(sys.stdin and sys.stdin.isatty() and sys.stdout and sys.stdout.isatty())


def run(args) -> int:
    directory = Path(args.dir)
    target = directory / CAMPAIGN_FILE
    if target.exists():
        raise Finding(f"{target} already exists; nothing was written. Edit it, or give another folder to `cockpit init`")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is a file, not a folder; give the folder to hold campaign.toml")
    no_flags = args.gpu is None and args.days is None and args.start is None
    asked = False
    if no_flags and _on_terminal():
        _interactive(args)
        asked = True
    if args.gpu is not None and not args.gpu.strip():
        raise UsageError("--gpu must name a GPU model, e.g. --gpu \"RTX 4090\"")
    gpu = " ".join((args.gpu or DEFAULT_GPU).split())
    offers = catalog.offers(gpu)
    days = args.days if args.days is not None else (offers[0].days if offers else DEFAULT_DAYS)
    start = args.start or _next_hour(datetime.now(UTC))
    price = _price(args.price) if args.price else None
    _check_lot(gpu, days, price)
    text = render(gpu, days, start, price)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text, mode=0o666, replace=False)  # never over a file made meanwhile; 0o666 as open() makes it (the umask decides)
    except FileExistsError:
        raise Finding(f"{target} already exists; nothing was written. Edit it, or give another folder to `cockpit init`") from None
    except OSError as error:
        raise Finding(f"cannot write {target}: {error.strerror}") from None
    entry = catalog.model(gpu)
    shown = entry.name if entry else gpu
    schema_written = _write_schema(directory / SCHEMA_FILE)
    print(f"wrote {target}: {shown} lot, {days} days from {_toml_time(start)}, a control and one variant")
    if no_flags and not asked:
        print("  defaults used: set them with --gpu MODEL --days N --start ISO (and --price USD where the catalogue has none)")
    print(f"  next: edit it, then `cockpit check {directory}` and `cockpit plan {directory}`")
    if schema_written:
        print(f"  and {directory / SCHEMA_FILE}, the JSON Schema its first line points an editor at (`cockpit schema` prints it)")
    return 0
