"""`cockpit demo [DIR]`: a live campaign to watch on any machine — the demo campaign copied into
DIR with its lot starting now, three real toy training runs started in the background, and the
cockpit opened on it. On quit it asks whether to stop the runs."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

from cockpit.common.times import utc_now
from cockpit.errors import Finding, UsageError


def _target(args) -> Path:
    """DIR as given, else a new folder in the user's data folder (never the current directory,
    which may be a repository): ~/.local/share/cockpit/demo-<timestamp> on Linux."""
    if args.dir:
        return Path(args.dir)
    import platformdirs

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return platformdirs.user_data_path("cockpit") / f"demo-{stamp}"


def _ask_to_stop(count: int) -> bool:
    """Stop the runs? Yes unless a person at a terminal says no."""
    if not sys.stdin.isatty():
        return True
    try:
        answer = input(f"Stop the {count} demo run{'s' if count != 1 else ''} still going? [Y/n] ").strip().lower()
    except EOFError:
        return True
    return answer not in ("n", "no")


def run(args) -> int:
    from cockpit.plan.load import load_campaign
    from cockpit.demo.setup import launch_runs, prepare_demo, stop_runs

    themes = None
    if args.no_tui and (args.metrics is not None or args.lot):
        raise UsageError("--metrics and --lot go with the demo's TUI; with --no-tui, serve it with "
                         "`cockpit watch DIR --headless --metrics 127.0.0.1:9464` once it is made")
    if not args.no_tui:  # refused before anything is made or started
        from cockpit.commands.tui import require_terminal, theme_catalog
        from cockpit.export.server import parse_address
        from cockpit.lots.config import lot_sources

        themes = theme_catalog(args.theme)
        if args.metrics is not None:
            parse_address(args.metrics)
        lot_sources(args.lot)  # a bad --lot or lots.toml is said before the demo starts
        require_terminal("for the demo without one use `cockpit demo --no-tui`, then `cockpit status DIR`")
    target = _target(args)
    try:
        directory = prepare_demo(target, utc_now())
    except FileExistsError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise Finding(f"cannot make the demo campaign in {target}: {error.strerror}") from None
    campaign = load_campaign(directory)
    processes = launch_runs(directory)
    print(f"demo campaign in {directory}: {len(processes)} toy runs started (pids {', '.join(str(p.pid) for p in processes)})")
    if not args.dir:
        print("  (in your data folder; `cockpit demo DIR` puts it elsewhere)")
    faults = getattr(args, "gpu_fault", None) or []
    if args.no_tui and faults:
        from cockpit.demo.faults import watch_faults

        status = watch_faults(campaign, faults, say=lambda text: print(text, flush=True))
        print(f"the runs go on; watch them with `cockpit {directory}` or `cockpit status {directory}`")
        return status
    if args.no_tui:
        print(f"watch it with `cockpit {directory}` or `cockpit status {directory}`; the runs end by themselves")
        return 0

    from cockpit.commands.live import other_lots, status_extra
    from cockpit.commands.tui import run_app
    from cockpit.export.server import serve
    from cockpit.live.engine import Engine
    from cockpit.live.gpu_source import live_gpus

    try:
        # the demo's lot is an RTX 4090: simulated figures in its range (24 GB, 450 W), labelled simulated
        if faults:
            from cockpit.demo.faults import faulty_gpus

            gpus = faulty_gpus(campaign, faults)
        else:
            gpus = live_gpus(simulate=campaign.lot.gpu_count, name=campaign.lot.gpu_model,
                             memory_total_bytes=24 * 2**30, power_limit_w=450.0)
        lots = other_lots(args, campaign)
        server, latest = serve(args.metrics, campaign, status_extra(campaign))
        engine = Engine(campaign, gpus=gpus, extra_alerts=lots.alerts if lots else None)
        return run_app(campaign, engine, theme=args.theme, bell=True, themes=themes, server=server, latest=latest, lots=lots)
    finally:
        alive = [p for p in processes if p.poll() is None]
        if alive and _ask_to_stop(len(alive)):
            stop_runs(alive)
            print(f"stopped {len(alive)} demo run{'s' if len(alive) != 1 else ''}")
        elif alive:
            print(f"{len(alive)} demo runs go on; `cockpit {directory}` to watch them again")
