"""`cockpit [DIR] [--theme NAME] [--no-bell]`: the cockpit on the campaign in DIR.

Everything that can be refused is refused before the screen is taken over: an unknown theme
(usage, exit 2), an invalid campaign (exit 1), no terminal to draw on (usage, exit 2).
"""

from __future__ import annotations

import sys

from cockpit.errors import UsageError


def theme_catalog(theme: str | None):
    """The themes on offer; an unknown --theme is a usage error listing them."""
    from cockpit.tui.themes import discover_themes, user_theme_dir

    catalog = discover_themes()
    if theme is not None and theme not in catalog.themes and catalog.problem(theme) is None:
        # A theme file that exists but is broken is not a usage error: the app falls back and says why.
        raise UsageError(
            f"no theme '{theme}' (themes: {', '.join(catalog.names) or 'none found'}); "
            f"add your own as a TOML file in {user_theme_dir()}"
        )
    return catalog


def require_terminal(hint: str) -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError(f"the cockpit needs a terminal (run it in tmux over SSH); {hint}")


def run_app(campaign, engine, *, theme: str | None, bell: bool, themes, server=None, latest=None, lots=None) -> int:
    """Run the TUI over `engine` until the user quits; the engine is closed after the last tick
    (and the metrics server and the other lots' watchers with it)."""
    from cockpit.export.server import PublishingSource
    from cockpit.live.runs import terminate_run_of
    from cockpit.notify.sender import alongside
    from cockpit.tui.app import CockpitApp

    engine = alongside(campaign, engine)  # notifications, when configured: their notices join the snapshot's
    app = None
    try:
        app = CockpitApp(
            campaign,
            PublishingSource(engine, latest) if latest is not None else engine,
            engine.log,
            lots=lots.start() if lots else None,
            theme=theme,  # None: the dark theme, or the monochrome one under NO_COLOR
            bell=bell,
            signal_run=lambda run_id: terminate_run_of(campaign, run_id),
            themes=themes,
        )
        app.run()
    finally:
        if server is not None:
            server.close()
        if lots:
            lots.close()
        if app is not None:
            with app.tick_lock:  # a tick still under way in its thread finishes first
                engine.close()
            app.left.set()  # over: the terminal watchdog stands down
        else:
            engine.close()
    return app.return_code or 0


def run(args) -> int:
    from cockpit.plan.load import load_campaign

    catalog = theme_catalog(args.theme)
    campaign = load_campaign(args.dir)
    require_terminal(f"for a one-off view without one use `cockpit status {args.dir}` or `cockpit status {args.dir} --json`")
    # Imported here: the engine samples NVML and reads the runs' metrics, which `cockpit --help` never needs.
    from cockpit.commands.live import other_lots, status_extra
    from cockpit.export.server import parse_address, serve
    from cockpit.live.engine import Engine
    from cockpit.live.gpu_source import live_gpus

    if args.metrics is not None:
        parse_address(args.metrics)  # a bad address is refused before anything starts
    lots = other_lots(args, campaign)
    server, latest = serve(args.metrics, campaign, status_extra(campaign))
    # NVML on its own thread: a hung driver call never freezes the screen
    engine = Engine(campaign, gpus=live_gpus(), extra_alerts=lots.alerts if lots else None)
    return run_app(campaign, engine, theme=args.theme, bell=not args.no_bell, themes=catalog, server=server, latest=latest, lots=lots)
